// The step benchmarks' shared rig (bench_step: the MLP, bench_gpt_step: the GPT, on the CPU or a
// GPU): the training state of a model on one rank, and the phases of its step timed one by one
// (forward + loss, backward, the unscale pass, the optimizer, the scale update), means over `steps`
// after a warm-up. Each phase ends with the backend's synchronize(), so an asynchronous device's
// phase is timed to its completion (on the CPU the ops are synchronous and it costs nothing).
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "amp/mixed_precision.h"
#include "backend/backend.h"
#include "model/model.h"
#include "optim/state_bytes.h"

namespace amp::bench {

inline double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class StepPhases {
 public:
  // The model's parameters initialized (seed 1) into FP32 masters and their working copy in dt.
  StepPhases(Backend& be, Model& model, DType dt, float init_scale)
      : be_(be), model_(model), dt_(dt), n_(model.layout().total),
        chunk_(std::min(n_, unscale_chunk(size_t(25) << 20))),
        pass_(unscale_pass(chunk_, be.optimizer().pass_elements())) {
    sums_ = be.memory().alloc(2 * sizeof(float));
    master_ = be.memory().alloc(n_ * 4), lp_ = be.memory().alloc(n_ * dtype_size(dt)), grads_ = be.memory().alloc(n_ * dtype_size(dt));
    g32_ = be.memory().alloc(chunk_ * 4), m_ = be.memory().alloc(n_ * 4), v_ = be.memory().alloc(n_ * 4);
    const std::vector<float> w = model.init_params(1);
    be.memory().upload(master_.data(), w.data(), n_ * 4);
    be.ops().cast(master_.data(), DType::F32, lp_.data(), dt, n_);
    ScalerParams sp;
    sp.init_scale = init_scale;
    std::vector<std::string> names;
    for (const auto& t : model.layout().tensors) names.push_back(t.name);
    amp_ = std::make_unique<MixedPrecision>(be.memory(), be.amp_kernels(), sp, dt, model.layout().spans(), names, 0, 1);
  }

  // Runs warmup + steps steps on the staged batch of `rows`; returns the mean step time (s).
  // measure_start (if any) is called where the timed steps begin (after the warm-up).
  double run(size_t rows, float inv_count, size_t warmup, size_t steps,
             const std::function<void()>& measure_start = {}) {
    const void* params = dt_ == DType::F32 ? master_.data() : lp_.data();
    float lr = 1e-4f;
    const LossSums sums{sums_.as<float>(), reinterpret_cast<int32_t*>(sums_.as<float>() + 1)};
    Buffer lr_buf = be_.memory().alloc(sizeof(float));  // the optimizer reads the rate where the backend computes
    be_.memory().upload(lr_buf.data(), &lr, sizeof lr);
    OptimizerParams op;
    MixedPrecision& amp = *amp_;
    auto timed = [&](const char* name, auto&& fn) {
      const double t0 = now();
      fn();
      be_.memory().synchronize();
      t_[name] += now() - t0;
    };
    for (size_t s = 0; s < warmup + steps; ++s) {
      if (s == warmup) {
        t_.clear();
        if (measure_start) measure_start();
      }
      amp.begin_step();
      be_.memory().zero(sums_.data(), 2 * sizeof(float));
      timed("forward+loss", [&] { model_.forward_loss(params, rows, amp.scale(), inv_count, true, sums); });
      timed("backward", [&] { model_.backward(params, grads_.data(), rows, [](int) {}); });
      timed("check+norm", [&] {
        amp.unscale_and_check(grads_.data());
        amp.agree(nullptr);
        amp.check_norm(0.0f);
      });
      timed("optimizer (+unscale, cast)", [&] {
        // As the trainer (TrainStep::optimizer_range): a pass at a time unscaled into g32, then
        // its update.
        const size_t es = dtype_size(dt_);
        for (size_t b = 0; b < n_; b += pass_) {
          const size_t len = std::min(pass_, n_ - b);
          amp.unscale(static_cast<const char*>(grads_.data()) + b * es, len, g32_.as<float>());
          OptimizerStepArgs a;
          a.params = op;
          a.lr = lr_buf.as<float>();
          a.master = master_.as<float>() + b, a.g32 = g32_.as<float>();
          a.state1 = m_.as<float>() + b, a.state2 = v_.as<float>() + b, a.n = len;
          a.lp = dt_ == DType::F32 ? nullptr : static_cast<char*>(lp_.data()) + b * es, a.lp_dtype = dt_;
          a.verdict = amp.verdict();
          be_.optimizer().optimizer_step(a);
        }
      });
      timed("scale update", [&] { amp.update(); });
    }
    steps_ = steps;
    step_ = 0;
    for (auto& kv : t_) step_ += kv.second;
    step_ /= double(steps);
    return step_;
  }

  // The bytes a phase outside the model's ops must move in a step, each input read and each output
  // written once (the floor a copy of as many bytes sets): the overflow check and norm read the
  // gradients; the update reads them and the master weights and moments, writes those and the
  // working copy (the unscaled FP32 pass, written and read back in the caches, not counted, as
  // in bench_stream). 0 for the other phases.
  double bytes(const std::string& phase) const {
    const double n = double(n_), es = double(dtype_size(dt_));
    if (phase == "check+norm") return n * es;
    if (phase == "optimizer (+unscale, cast)")
      return n * (es + 8.0 * double(1 + optimizer_moments(OptimizerParams{})) + (dt_ == DType::F32 ? 0.0 : es));
    return 0.0;
  }
  const std::map<std::string, double>& seconds() const { return t_; }  // per phase, over the timed steps
  size_t steps() const { return steps_; }

  // "  <phase>  <ms>  <share>" lines, and the AMP bookkeeping's share of the step.
  double print() const {
    for (auto& kv : t_)
      std::printf("  %-22s %8.3f ms  %5.1f%%\n", kv.first.c_str(), kv.second / double(steps_) * 1e3,
                  100.0 * kv.second / double(steps_) / step_);
    return (t_.at("check+norm") + t_.at("scale update")) / double(steps_) / step_;
  }

 private:
  Backend& be_;
  Model& model_;
  DType dt_;
  size_t n_;
  size_t chunk_;  // elements of g32, as the trainer's default (distributed.bucket_mb 25)
  size_t pass_;   // elements unscaled and updated at a time, as the trainer's (the backend's pass_elements)
  Buffer master_, lp_, grads_, g32_, m_, v_, sums_;
  std::unique_ptr<MixedPrecision> amp_;
  std::map<std::string, double> t_;
  size_t steps_ = 0;
  double step_ = 0;
};

}  // namespace amp::bench
