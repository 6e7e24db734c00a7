// One rank's training step on a Backend without the trainer around it: the calls of
// TrainStep::device_step for a classification MLP (forward and loss, backward, the
// mixed-precision owner's unscale-and-check, the optimizer, the scale update) on one rank. The GPU
// tests replay it from a CUDA graph against eager runs; bench_gpu_step times it and its parts.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "amp/mixed_precision.h"
#include "backend/backend.h"
#include "core/rng.h"
#include "model/mlp.h"
#include "train/step.h"

namespace amp::bench {

class StepRig {
 public:
  StepRig(Backend& be, DType compute, const std::vector<size_t>& dims, size_t batch, Activation act,
          const ScalerParams& sp)
      : be_(be), compute_(compute), batch_(batch), model_(be.memory(), be.ops(), options(dims, act), compute, batch) {
    const ParamLayout& L = model_.layout();
    const size_t n = L.total;
    const std::vector<float> init = model_.init_params(5);
    master_ = be.memory().alloc(n * 4);
    be.memory().upload(master_.data(), init.data(), n * 4);
    lp_ = be.memory().alloc(n * dtype_size(compute));
    be.ops().cast(master_.data(), DType::F32, lp_.data(), compute, n);
    grads_ = be.memory().alloc(n * dtype_size(compute));
    g32_ = be.memory().alloc(n * 4);
    m_ = be.memory().alloc(n * 4);
    v_ = be.memory().alloc(n * 4);
    op_.kind = OptimizerKind::AdamW;
    op_.weight_decay = 0.01f;
    sums_ = be.memory().alloc(sizeof(StepSums));
    dev_ = sums_.as<StepSums>();
    std::vector<std::string> names;
    for (const auto& t : L.tensors) names.push_back(t.name);
    amp_ = std::make_unique<MixedPrecision>(be.memory(), be.amp_kernels(), sp, compute, L.spans(), names, 0, 1);
  }

  // Host part of step `step` (1-based): a seeded batch and the learning rate, uploaded. With
  // plant_inf the batch holds an infinity, so the step overflows and is skipped.
  void inputs(int step, bool plant_inf = false) {
    Rng r(1000 + uint64_t(step));
    Dataset d;
    d.n = batch_;
    d.n_features = model_.dims().front();
    d.n_classes = int(model_.dims().back());
    d.x.resize(batch_ * d.n_features);
    for (auto& v : d.x) v = float(r.normal());
    if (plant_inf) d.x[d.x.size() / 2] = std::numeric_limits<float>::infinity();
    d.labels.resize(batch_);
    for (auto& v : d.labels) v = int32_t(r.below(model_.dims().back()));
    const float lr = 1e-3f / float(step);
    model_.stage(d, nullptr, 0, batch_);
    be_.memory().upload(&dev_->lr, &lr, sizeof lr);
  }

  // Flags reset, input cast, forward, loss, backward: the low-precision part.
  void forward_backward() {
    amp_->begin_step();
    model_.forward_loss(lp_.data(), batch_, amp_->scale(), 1.0f / float(batch_), true,
                        LossSums{&dev_->loss_sum, &dev_->correct});
    model_.backward(lp_.data(), grads_.data(), batch_, [](int) {});
  }
  // The mixed-precision bookkeeping: overflow check + norm of the unscaled gradients, and the scale
  // update (the optimizer unscales them again as it reads them).
  void unscale_check() {
    amp_->unscale_and_check(grads_.data());
    amp_->agree(nullptr);
    amp_->check_norm(1.0f);
  }
  void optimizer() {
    amp_->unscale(grads_.data(), model_.layout().total, g32_.as<float>());
    OptimizerStepArgs a;
    a.params = op_;
    a.lr = &dev_->lr;
    a.max_norm = 1.0f;
    a.master = master_.as<float>(), a.g32 = g32_.as<float>();
    a.state1 = m_.as<float>(), a.state2 = v_.as<float>(), a.n = model_.layout().total;
    a.lp = lp_.data(), a.lp_dtype = compute_;
    a.verdict = amp_->verdict();
    be_.optimizer().optimizer_step(a);
  }
  void update_scale() { amp_->update(); }
  // A step's bookkeeping alone (flags reset, check, scale update): no forward, backward or update.
  void bookkeeping() {
    amp_->begin_step();
    unscale_check();
    update_scale();
  }

  void device_step() {
    forward_backward();
    unscale_check();
    optimizer();
    update_scale();
  }

  // Every bit of state a step changes (weights, working copy, moments, scalars, flags).
  std::vector<unsigned char> state() {
    std::vector<unsigned char> out;
    for (const Buffer* b : {&master_, &lp_, &m_, &v_, &sums_}) {
      std::vector<unsigned char> raw(b->bytes());
      be_.memory().download(raw.data(), b->data(), raw.size());
      out.insert(out.end(), raw.begin(), raw.end());
    }
    const AmpScalars a = amp_->read();
    const unsigned char* ap = reinterpret_cast<const unsigned char*>(&a);
    out.insert(out.end(), ap, ap + sizeof a);
    for (int32_t f : amp_->read_flags()) {
      const unsigned char* fp = reinterpret_cast<const unsigned char*>(&f);
      out.insert(out.end(), fp, fp + sizeof f);
    }
    return out;
  }
  AmpScalars scalars() { return amp_->read(); }

  Mlp& model() { return model_; }
  const void* lp() const { return lp_.data(); }
  void* grads() const { return grads_.data(); }
  size_t batch() const { return batch_; }

 private:
  static MlpOptions options(const std::vector<size_t>& dims, Activation act) {
    MlpOptions o;
    o.dims = dims;
    o.activation = act;
    return o;
  }

  Backend& be_;
  DType compute_;
  size_t batch_;
  Mlp model_;
  OptimizerParams op_;
  Buffer master_, lp_, grads_, g32_, m_, v_, sums_;
  StepSums* dev_ = nullptr;
  std::unique_ptr<MixedPrecision> amp_;
};

}  // namespace amp::bench
