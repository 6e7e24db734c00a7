#include "train/working_weights.h"

namespace amp {

WorkingWeights::WorkingWeights(Backend& be, const float* host, size_t n, DType compute) : compute_(compute) {
  master_ = be.memory().alloc(n * sizeof(float));
  be.memory().upload(master_.data(), host, n * sizeof(float));
  if (compute == DType::F32) return;
  working_ = be.memory().alloc(n * dtype_size(compute));
  be.ops().cast(master_.data(), DType::F32, working_.data(), compute, n);
}

}  // namespace amp
