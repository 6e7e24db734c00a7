// optimizer_step on the device: SGD / AdamW on FP32 master weights through the element functions
// of optim/optimizer.h, with the step scalars (clip coefficient, bias corrections) computed on the
// device from *lr, *norm_sq and the scaler's applied-step count. Every thread returns at once when
// the global overflow flag is set (by the pre-reduction checks, the unscale pass or check_norm):
// the coordinated skip costs no host round trip.
#include "cuda/kernel_util.cuh"

namespace amp::cuda {

namespace {

template <typename LP>
__global__ void __launch_bounds__(kThreads) optimizer_kernel(OptimizerParams p, const float* __restrict__ lr,
                                                             float max_norm, float* __restrict__ master,
                                                             const float* __restrict__ g32, float* __restrict__ state1,
                                                             float* __restrict__ state2, size_t n, LP* __restrict__ lp,
                                                             const int32_t* flags,
                                                             const float* __restrict__ norm_sq,
                                                             const ScalerState* __restrict__ scaler) {
  if (flags[OverflowFlags::kAny]) return;  // the same for every thread: the grid leaves before __syncthreads
  __shared__ StepScalars shared_scalars;
  if (threadIdx.x == 0) {
    const float grad_mul = max_norm > 0.0f ? clip_coefficient(max_norm, *norm_sq) : 1.0f;
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
                    const int32_t* flags, const float* norm_sq, const ScalerState* scaler) {
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
