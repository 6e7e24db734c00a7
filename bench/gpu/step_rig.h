// One rank's training step on a Backend without the trainer around it: the buffers and calls of
// Trainer::device_step for a classification MLP (cast, forward, softmax cross-entropy, backward,
// unscale_check, optimizer_step, update_scale). The GPU tests replay it from a CUDA graph against
// eager runs; bench_gpu_step times it and its parts.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "backend/backend.h"
#include "core/rng.h"
#include "model/mlp.h"
#include "train/trainer.h"

namespace amp::bench {

class StepRig {
 public:
  StepRig(Backend& be, DType compute, const std::vector<size_t>& dims, size_t batch, Activation act,
          const ScalerParams& sp)
      : be_(be), compute_(compute), batch_(batch), in_(dims.front()), model_(be, dims, act, compute, batch), sp_(sp) {
    spans_ = model_.layout().spans();
    const size_t n = model_.layout().total;
    const std::vector<float> init = model_.init_params("pytorch", 0.01, 5);
    master_ = be.alloc(n * 4);
    be.upload(master_.data(), init.data(), n * 4);
    lp_ = be.alloc(n * dtype_size(compute));
    be.cast(master_.data(), DType::F32, lp_.data(), compute, n);
    grads_ = be.alloc(n * dtype_size(compute));
    g32_ = be.alloc(n * 4);
    m_ = be.alloc(n * 4);
    v_ = be.alloc(n * 4);
    op_.kind = OptimizerKind::AdamW;
    op_.weight_decay = 0.01f;
    StepScalarsDev s0;
    s0.scaler = scaler_init(sp);
    scalars_ = be.alloc(sizeof s0);
    be.upload(scalars_.data(), &s0, sizeof s0);
    dev_ = scalars_.as<StepScalarsDev>();
    flags_ = be.alloc(OverflowFlags::count(1) * 4);
    x32_ = be.alloc(batch * in_ * 4);
    xlp_ = be.alloc(batch * in_ * dtype_size(compute));
    labels_ = be.alloc(batch * 4);
  }

  // Host part of step `step` (1-based): a seeded batch and the learning rate, uploaded. With
  // plant_inf the batch holds an infinity, so the step overflows and is skipped.
  void inputs(int step, bool plant_inf = false) {
    Rng r(1000 + uint64_t(step));
    std::vector<float> x(batch_ * in_);
    for (auto& v : x) v = float(r.normal());
    if (plant_inf) x[x.size() / 2] = std::numeric_limits<float>::infinity();
    std::vector<int32_t> y(batch_);
    for (auto& v : y) v = int32_t(r.below(model_.dims().back()));
    const float lr = 1e-3f / float(step);
    be_.upload(x32_.data(), x.data(), x.size() * 4);
    be_.upload(labels_.data(), y.data(), y.size() * 4);
    be_.upload(&dev_->lr, &lr, sizeof lr);
  }

  // Input cast, flags reset, forward, loss, backward: the low-precision part.
  void forward_backward() {
    be_.cast(x32_.data(), DType::F32, xlp_.data(), compute_, batch_ * in_);
    be_.zero(flags_.data(), OverflowFlags::count(1) * 4);
    const Tensor logits = model_.forward(xlp_.tensor(compute_, batch_, in_), lp_.data(), batch_);
    const Tensor dl = model_.dlogits(batch_);
    be_.softmax_xent(logits, labels_.as<int32_t>(), &dev_->scaler.scale, 1.0f / float(batch_), dl, &dev_->loss_sum,
                     &dev_->correct);
    model_.backward(dl, lp_.data(), grads_.data(), batch_, [](int) {});
  }
  // The mixed-precision bookkeeping: unscale + overflow check + norm, and the scale update.
  void unscale_check() {
    be_.unscale_check(grads_.data(), compute_, spans_, &dev_->scaler.scale, g32_.as<float>(), flags_.as<int32_t>(),
                      &dev_->norm_sq);
  }
  void optimizer() {
    be_.optimizer_step(op_, &dev_->lr, 1.0f, master_.as<float>(), g32_.as<float>(), m_.as<float>(), v_.as<float>(),
                       model_.layout().total, lp_.data(), compute_, flags_.as<int32_t>(), &dev_->norm_sq,
                       &dev_->scaler);
  }
  void update_scale() { be_.update_scale(&dev_->scaler, sp_, flags_.as<int32_t>(), 1); }

  void device_step() {
    forward_backward();
    unscale_check();
    optimizer();
    update_scale();
  }

  // Every bit of state a step changes (weights, working copy, moments, scalars, flags).
  std::vector<unsigned char> state() {
    std::vector<unsigned char> out;
    for (const Buffer* b : {&master_, &lp_, &m_, &v_, &scalars_, &flags_}) {
      std::vector<unsigned char> raw(b->bytes());
      be_.download(raw.data(), b->data(), raw.size());
      out.insert(out.end(), raw.begin(), raw.end());
    }
    return out;
  }
  StepScalarsDev scalars() {
    StepScalarsDev s;
    be_.download(&s, dev_, sizeof s);
    return s;
  }

  Mlp& model() { return model_; }
  const void* lp() const { return lp_.data(); }
  void* grads() const { return grads_.data(); }
  size_t batch() const { return batch_; }

 private:
  Backend& be_;
  DType compute_;
  size_t batch_, in_;
  Mlp model_;
  ScalerParams sp_;
  OptimizerParams op_;
  std::vector<TensorSpan> spans_;
  Buffer master_, lp_, grads_, g32_, m_, v_, scalars_, flags_, x32_, xlp_, labels_;
  StepScalarsDev* dev_ = nullptr;
};

}  // namespace amp::bench
