#include "train/working_weights.h"

namespace amp {

WorkingWeights::WorkingWeights(Backend& be, const float* host, size_t n, DType compute) : compute_(compute) {
  master_ = be.memory().alloc(n * sizeof(float));
  be.memory().upload(master_.data(), host, n * sizeof(float));
  if (compute == DType::F32) return;
  working_ = be.memory().alloc(n * dtype_size(compute));
  be.ops().cast(master_.data(), DType::F32, working_.data(), compute, n);
}

FixedFp8Scales::FixedFp8Scales(Backend& be, Model& model, const std::vector<float>& scales, bool native_gemm) {
  const size_t n = scales.size();
  std::vector<float> both(scales);
  for (size_t t = 0; t < n; ++t) both.push_back(1.0f / scales[t]);  // exact: powers of two
  scales_ = be.memory().alloc(both.size() * sizeof(float));
  be.memory().upload(scales_.data(), both.data(), both.size() * sizeof(float));
  Fp8Binding b;
  b.scales = scales_.as<float>();
  b.inv_scales = b.scales + n;
  b.native_gemm = native_gemm && be.ops().native_fp8_gemm();
  model.bind_fp8(b);
}

}  // namespace amp
