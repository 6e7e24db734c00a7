// The kernels of mixed-precision bookkeeping and of the optimizer. They compute; the decisions
// (what a flag slot means, when a step is skipped, how the scale moves) belong to amp/ (the
// flag layout, the scaler state machine and flag_norm_overflow are shared host/device code there)
// and the caller is amp::MixedPrecision. Pointers are backend memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "amp/fp8_scaling.h"
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
  // PyTorch; not stored when out32 is null: the optimizer unscales again, see unscale), flags[kReduced] = 1 + first tensor with a non-finite value (0 if none),
  // flags[kAny] |= that, and *norm_sq = sum of squares of out32 when norm_sq is non-null; when
  // norm_bits is non-null the sum (a sharded partial) goes there in double instead
  // (store_norm_partial, amp/overflow_flags.h).
  virtual void unscale_check(const void* grads, DType dtype, const std::vector<TensorSpan>& spans,
                             const float* scale, float* out32, int32_t* flags, float* norm_sq,
                             int32_t* norm_bits = nullptr) = 0;
  // out32[i] = float(grads[i]) * (1 / *scale) for i in [0, n): the fused pass's values, bit for bit
  // (the optimizer unscales its gradients chunk by chunk instead of keeping an FP32 copy of all).
  virtual void unscale(const void* grads, DType dtype, size_t n, const float* scale, float* out32) = 0;
  // flag_norm_overflow(flags, *norm_sq, max_norm) (amp/overflow_flags.h).
  virtual void check_norm(const float* norm_sq, float max_norm, int32_t* flags) = 0;
  // *norm_sq = sum_norm_partials(flags, world) (amp/overflow_flags.h): sharded gradients.
  virtual void sum_norm_partials(const int32_t* flags, int world, float* norm_sq) = 0;
  // Per-tensor zero / subnormal fractions and largest magnitude (telemetry; host results).
  virtual std::vector<GradStats> grad_stats(const void* grads, DType dtype, const std::vector<TensorSpan>& spans) = 0;
  // scaler_record_flags(*state, flags, world), then scaler_update(*state, params, flags[kAny] != 0).
  virtual void update_scale(ScalerState* state, const ScalerParams& params, const int32_t* flags, int world) = 0;
  // FP8 (precision.compute fp8): fp8_update(scales, fmax, history, meta, amax_words, n, p,
  // flags[kAny] != 0, inv_scales, skipped_amax) (amp/fp8_scaling.h), after the step's all-reduce.
  virtual void fp8_update(float* scales, const float* fmax, float* history, Fp8Meta* meta, const int32_t* amax_words,
                          int n, const Fp8Params& p, const int32_t* flags, float* inv_scales,
                          int32_t* skipped_amax) = 0;
};

// The step's verdict as the optimizer reads it: backend memory that the kernels above wrote,
// handed over by amp::MixedPrecision::verdict().
struct AmpVerdict {
  const int32_t* flags = nullptr;       // OverflowFlags: flags[kAny] set -> the step is skipped
  const float* norm_sq = nullptr;       // squared norm of the unscaled gradients (clipping)
  const ScalerState* scaler = nullptr;  // optimizer_steps + 1 is AdamW's t
};

// One optimizer step over n contiguous master weights.
struct OptimizerStepArgs {
  OptimizerParams params;      // the rule and its hyper-parameters (weight_decay: for this range)
  const float* lr = nullptr;   // backend memory: a captured step (CUDA graph) reads each step's value
  float max_norm = 0.0f;       // the gradients' global norm is clipped to this (0: no clipping)
  float* master = nullptr;     // n FP32 master weights, updated in place
  const float* g32 = nullptr;  // n unscaled FP32 gradients
  float* state1 = nullptr;     // SGD momentum / AdamW first moment (null when the rule has none)
  float* state2 = nullptr;     // AdamW second moment
  size_t n = 0;
  void* lp = nullptr;          // when not null, the new weights are written here too, in lp_dtype
  DType lp_dtype = DType::F32;  //   (the working copy for the next step)
  AmpVerdict verdict;
};

class OptimizerKernels {
 public:
  virtual ~OptimizerKernels() = default;
  // The step, unless verdict.flags[kAny] is set (then nothing changes). The gradients are
  // multiplied by clip_coefficient(max_norm, *verdict.norm_sq) (optim/optimizer.h).
  virtual void optimizer_step(const OptimizerStepArgs& a) = 0;
  // Elements the step unscales and then updates per pass (TrainStep::optimizer_range), at most its
  // chunk of FP32 unscaled gradients; 0: the whole chunk (a bucket's bytes in FP32). A CPU keeps a
  // pass's unscaled gradients in its caches for the update; a GPU pays a launch per pass.
  virtual size_t pass_elements() const { return 0; }
};

}  // namespace amp
