// update_scale on the device: one thread runs the host's scaler state machine (amp/loss_scaler.h)
// on the reduced overflow flags, so the scale never leaves device memory.
#include "cuda/kernel_util.cuh"

namespace amp::cuda {

namespace {

__global__ void update_scale_kernel(ScalerState* state, ScalerParams params, const int32_t* flags, int world) {
  scaler_record_flags(*state, flags, world);
  scaler_update(*state, params, flags[OverflowFlags::kAny] != 0);
}

}  // namespace

void update_scale(const Launch& l, ScalerState* state, const ScalerParams& params, const int32_t* flags, int world) {
  update_scale_kernel<<<1, 1, 0, l.stream>>>(state, params, flags, world);
  AMP_CHECK_LAUNCH("update_scale_kernel");
}

}  // namespace amp::cuda
