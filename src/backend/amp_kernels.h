// The kernels of mixed-precision bookkeeping and of the optimizer. They compute; the decisions
// (what a flag slot means, when a step is skipped, how the scale moves) belong to amp/ (the
// flag layout, the scaler state machine and flag_norm_overflow are shared host/device code there)
// and the caller is amp::MixedPrecision. Pointers are backend memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "amp/loss_scaler.h"
#include "backend/tensor.h"
#include "core/dtype.h"
#include "optim/optimizer.h"

namespace amp {

// Per-tensor statistics of 16-bit gradients (precision telemetry).
struct GradStats {
  double zero_frac = 0, subnormal_frac = 0;
  float max_abs = 0;  // of the stored (still scaled) values
};

class AmpKernels {
 public:
  virtual ~AmpKernels() = default;
  // Writes 1 + the index (into spans) of the first tensor holding a non-finite value within
  // elements [begin, end) of grads into *flag if *flag is 0 or larger (keeps the smallest).
  virtual void find_nonfinite(const void* grads, DType dtype, const std::vector<TensorSpan>& spans, size_t begin,
                              size_t end, int32_t* flag) = 0;
  // The fused pass: out32 = float(grads) * (1 / *scale) (the reciprocal taken in double, as
  // PyTorch), flags[kReduced] = 1 + first tensor with a non-finite value (0 if none),
  // flags[kAny] |= that, and *norm_sq = sum of squares of out32 when norm_sq is non-null; when
  // norm_bits is non-null the sum (a sharded partial) goes there in double instead
  // (store_norm_partial, amp/overflow_flags.h).
  virtual void unscale_check(const void* grads, DType dtype, const std::vector<TensorSpan>& spans,
                             const float* scale, float* out32, int32_t* flags, float* norm_sq,
                             int32_t* norm_bits = nullptr) = 0;
  // flag_norm_overflow(flags, *norm_sq, max_norm) (amp/overflow_flags.h).
  virtual void check_norm(const float* norm_sq, float max_norm, int32_t* flags) = 0;
  // *norm_sq = sum_norm_partials(flags, world) (amp/overflow_flags.h): sharded gradients.
  virtual void sum_norm_partials(const int32_t* flags, int world, float* norm_sq) = 0;
  // Per-tensor zero / subnormal fractions and largest magnitude (telemetry; host results).
  virtual std::vector<GradStats> grad_stats(const void* grads, DType dtype, const std::vector<TensorSpan>& spans) = 0;
  // scaler_record_flags(*state, flags, world), then scaler_update(*state, params, flags[kAny] != 0).
  virtual void update_scale(ScalerState* state, const ScalerParams& params, const int32_t* flags, int world) = 0;
};

class OptimizerKernels {
 public:
  virtual ~OptimizerKernels() = default;
  // One optimizer step over n master weights, unless flags[kAny] is set (then nothing changes).
  // lr is read from backend memory, so a captured step (CUDA graph) takes each step's value.
  // g32 are unscaled FP32 gradients; state1/state2: SGD momentum / AdamW m and v. The gradients are
  // multiplied by clip_coefficient(max_norm, *norm_sq) (optim/optimizer.h). t is taken from
  // scaler->optimizer_steps + 1. When lp is non-null the new weights are also written to it in
  // lp_dtype (the working copy for the next step).
  virtual void optimizer_step(const OptimizerParams& p, const float* lr, float max_norm, float* master,
                              const float* g32, float* state1, float* state2, size_t n, void* lp, DType lp_dtype,
                              const int32_t* flags, const float* norm_sq, const ScalerState* scaler) = 0;
};

}  // namespace amp
