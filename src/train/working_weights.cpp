#include "train/working_weights.h"

#include <algorithm>
#include <cstdint>

#include "core/convert.h"
#include "core/error.h"

namespace amp {

WorkingWeights::WorkingWeights(Backend& be, size_t n, DType compute)
    : mem_(be.memory()), compute_(compute), n_(n), weights_(be.memory().alloc(n * dtype_size(compute))) {}

WorkingWeights::WorkingWeights(Backend& be, WeightPieces& src, size_t n, DType compute) : WorkingWeights(be, n, compute) {
  constexpr size_t kPiece = size_t(16) << 20;  // 64 MiB of FP32
  for (size_t b = 0; b < n; b += kPiece) {
    const size_t c = std::min(kPiece, n - b);
    load(b, src.next(b, c), c);
  }
  src.finish();
}

void WorkingWeights::load(size_t begin, const float* host, size_t count) {
  AMP_CHECK(begin <= n_ && count <= n_ - begin, "WorkingWeights::load: elements [", begin, ", ", begin + count, ") of ", n_);
  char* dst = static_cast<char*>(weights_.data()) + begin * dtype_size(compute_);
  if (compute_ == DType::F32) return mem_.upload(dst, host, count * sizeof(float));
  // Cast on the host (round to nearest even, as the backends' casts and the optimizer's working copy).
  std::vector<uint16_t> cast(count);
  convert(host, DType::F32, cast.data(), compute_, count);
  mem_.upload(dst, cast.data(), count * sizeof(uint16_t));
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
