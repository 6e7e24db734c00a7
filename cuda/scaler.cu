// The scaler's one-thread kernels: update_scale runs the host's scaler state machine
// (amp/loss_scaler.h) on the reduced overflow flags, check_norm the norm verdict
// (amp/overflow_flags.h) and sum_norm_partials the sharded norm, so the scale and the flags never leave device memory.
#include "cuda/kernel_util.cuh"

namespace amp::cuda {

namespace {

__global__ void update_scale_kernel(ScalerState* state, ScalerParams params, const int32_t* flags, int world) {
  scaler_record_flags(*state, flags, world);
  scaler_update(*state, params, flags[OverflowFlags::kAny] != 0);
}

__global__ void check_norm_kernel(const float* norm_sq, float max_norm, int32_t* flags) {
  flag_norm_overflow(flags, *norm_sq, max_norm);
}

__global__ void sum_norm_partials_kernel(const int32_t* flags, int world, float* norm_sq) {
  *norm_sq = amp::sum_norm_partials(flags, world);
}

}  // namespace

void sum_norm_partials(const Launch& l, const int32_t* flags, int world, float* norm_sq) {
  sum_norm_partials_kernel<<<1, 1, 0, l.stream>>>(flags, world, norm_sq);
  AMP_CHECK_LAUNCH("sum_norm_partials_kernel");
}

void check_norm(const Launch& l, const float* norm_sq, float max_norm, int32_t* flags) {
  check_norm_kernel<<<1, 1, 0, l.stream>>>(norm_sq, max_norm, flags);
  AMP_CHECK_LAUNCH("check_norm_kernel");
}

void update_scale(const Launch& l, ScalerState* state, const ScalerParams& params, const int32_t* flags, int world) {
  update_scale_kernel<<<1, 1, 0, l.stream>>>(state, params, flags, world);
  AMP_CHECK_LAUNCH("update_scale_kernel");
}

}  // namespace amp::cuda
