// optimizer_step on the device: SGD / AdamW on FP32 master weights through the element functions
// of optim/optimizer.h, with the step scalars (clip coefficient, bias corrections) computed on the
// device from *lr, *norm_sq and the scaler's applied-step count. Every thread returns at once when
// the global overflow flag is set: the coordinated skip costs no host round trip.
#include "cuda/kernel_util.cuh"

namespace amp::cuda {

namespace {

template <typename LP>
__global__ void __launch_bounds__(kThreads) optimizer_kernel(OptimizerParams p, const float* __restrict__ lr,
                                                             float max_norm, float* __restrict__ master,
                                                             const float* __restrict__ g32, float* __restrict__ state1,
                                                             float* __restrict__ state2, size_t n, LP* __restrict__ lp,
                                                             int32_t* flags,
                                                             const float* __restrict__ norm_sq,
                                                             const ScalerState* __restrict__ scaler) {
  // A step already skipped (non-finite gradients) keeps its attribution, as on the CPU: its norm is
  // non-finite too, but the flags name the tensor. Otherwise clipping by a non-finite norm would
  // zero the update: skip the step and mark it (one thread writes the mark, after it read kAny;
  // a thread that reads the mark instead of 0 leaves all the same, so the race decides nothing).
  if (flags[OverflowFlags::kAny]) return;
  const bool bad_norm = max_norm > 0.0f && !is_finite_f32(*norm_sq);
  if (bad_norm) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      flags[OverflowFlags::kAny] = 1;
      flags[OverflowFlags::kReduced] = OverflowFlags::kNormOverflow;
    }
    return;  // the same for every thread: the whole grid leaves, before the __syncthreads below
  }
  __shared__ StepScalars shared_scalars;
  if (threadIdx.x == 0) {
    float grad_mul = 1.0f;
    if (max_norm > 0.0f) {
      const float coef = max_norm / (sqrtf(*norm_sq) + 1e-6f);
      grad_mul = coef < 1.0f ? coef : 1.0f;
    }
    shared_scalars = make_step_scalars(p, *lr, grad_mul, scaler->optimizer_steps + 1);
  }
  __syncthreads();
  const StepScalars s = shared_scalars;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float w = master[i];
    if (p.kind == OptimizerKind::AdamW) {
      float m = state1[i], v = state2[i];
      adamw_update(w, g32[i], m, v, p, s);
      state1[i] = m;
      state2[i] = v;
    } else {
      float mom = state1 ? state1[i] : 0.0f;
      sgd_update(w, g32[i], mom, p, s);
      if (state1) state1[i] = mom;
    }
    master[i] = w;
    if (lp) lp[i] = from_f32<LP>(w);
  }
}

}  // namespace

void optimizer_step(const Launch& l, const OptimizerParams& p, const float* lr, float max_norm, float* master,
                    const float* g32, float* state1, float* state2, size_t n, void* lp, DType lp_dtype,
                    int32_t* flags, const float* norm_sq, const ScalerState* scaler) {
  if (n == 0) return;
  AMP_CHECK(p.kind != OptimizerKind::AdamW || (state1 && state2), "optimizer_step: AdamW needs both moment buffers");
  AMP_CHECK(p.kind != OptimizerKind::Sgd || p.momentum == 0.0f || state1, "optimizer_step: SGD momentum needs state1");
  AMP_CHECK(max_norm <= 0.0f || norm_sq, "optimizer_step: clipping needs norm_sq");
  const unsigned blocks = blocks_for(n, kThreads, l);
  dispatch_float(lp ? lp_dtype : DType::F32, "optimizer_step", [&](auto tag) {
    using LP = decltype(tag);
    optimizer_kernel<LP><<<blocks, kThreads, 0, l.stream>>>(p, lr, max_norm, master, g32, state1, state2, n,
                                                           static_cast<LP*>(lp), flags, norm_sq, scaler);
    AMP_CHECK_LAUNCH("optimizer_kernel");
  });
}

}  // namespace amp::cuda
