// Optimizers on FP32 master weights: per-element update rules shared by the CPU loops and the
// CUDA kernels (AMP_HD), so both backends do the same arithmetic. The step is skipped as a whole
// when the global overflow flag is set; the caller never calls these on a skipped step.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/hd.h"

namespace amp {

enum class OptimizerKind : int32_t { Sgd = 0, AdamW = 1 };

struct OptimizerParams {
  OptimizerKind kind = OptimizerKind::AdamW;
  float momentum = 0.0f;      // SGD
  bool nesterov = false;      // SGD
  float weight_decay = 0.0f;  // SGD: L2 added to the gradient (PyTorch SGD); AdamW: decoupled
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // AdamW
};

// Scalars of one step: the same for every element.
struct StepScalars {
  float lr;
  float grad_mul;       // clip coefficient (1 when clipping is off or the norm is small)
  float step_size;      // AdamW: lr / (1 - beta1^t), t = applied steps including this one
  float bias2_sqrt;     // AdamW: sqrt(1 - beta2^t)
};

// Clipping by the global norm: the gradients are multiplied by min(1, max_norm / (norm + eps)).
constexpr float kClipEpsilon = 1e-6f;
AMP_HD float clip_coefficient(float max_norm, float norm_sq) {
  if (!(max_norm > 0.0f)) return 1.0f;
  const float coef = max_norm / (sqrtf(norm_sq) + kClipEpsilon);
  return coef < 1.0f ? coef : 1.0f;
}

// Step scalars from the learning rate, the clip coefficient and the applied-step count t (>= 1).
AMP_HD StepScalars make_step_scalars(const OptimizerParams& p, float lr, float grad_mul, int64_t t) {
  StepScalars s;
  s.lr = lr;
  s.grad_mul = grad_mul;
  const double b1 = 1.0 - pow(double(p.beta1), double(t));
  const double b2 = 1.0 - pow(double(p.beta2), double(t));
  s.step_size = float(double(lr) / b1);
  s.bias2_sqrt = float(sqrt(b2));
  return s;
}

// PyTorch's torch.optim.SGD for one element (dampening 0); mom is the momentum buffer.
AMP_HD float sgd_update(float& w, float g, float& mom, const OptimizerParams& p, const StepScalars& s) {
  g *= s.grad_mul;
  if (p.weight_decay != 0.0f) g += p.weight_decay * w;
  if (p.momentum != 0.0f) {
    mom = p.momentum * mom + g;  // the buffer starts at 0, so the first step stores g (PyTorch)
    g = p.nesterov ? g + p.momentum * mom : mom;
  }
  w -= s.lr * g;
  return w;
}

// PyTorch's torch.optim.AdamW (decoupled weight decay, bias-corrected moments) for one element.
AMP_HD float adamw_update(float& w, float g, float& m, float& v, const OptimizerParams& p,
                          const StepScalars& s) {
  g *= s.grad_mul;
  w *= 1.0f - s.lr * p.weight_decay;
  m = p.beta1 * m + (1.0f - p.beta1) * g;
  v = p.beta2 * v + (1.0f - p.beta2) * g * g;
  const float denom = sqrtf(v) / s.bias2_sqrt + p.eps;
  w -= s.step_size * m / denom;
  return w;
}

}  // namespace amp
