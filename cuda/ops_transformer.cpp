#include "cuda/ops_transformer.h"

#include <algorithm>

#include "core/error.h"
#include "cudart/cuda_check.h"

namespace amp::cuda {

TransformerOps::TransformerOps() {
  int dev = 0, sms = 1;
  AMP_CUDA_CHECK(cudaGetDevice(&dev));
  AMP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  max_blocks_ = unsigned(sms > 0 ? sms : 1) * 8u;
}

TransformerOps::~TransformerOps() = default;

void TransformerOps::reserve(int64_t max_tokens, int64_t vocab) {
  AMP_CHECK(max_tokens >= 0 && max_tokens <= int64_t(INT32_MAX) && vocab >= 0 && vocab < int64_t(INT32_MAX),
            "reserve: max_tokens ", max_tokens, " vocab ", vocab, " out of range");
  const int64_t tokens = std::max(max_tokens_, max_tokens), v = std::max(vocab_, vocab);
  if (!keys_in_.get() || tokens > max_tokens_) {
    const size_t n = size_t(std::max<int64_t>(tokens, 1));
    keys_in_ = DeviceBuffer<uint32_t>(n);
    keys_out_ = DeviceBuffer<uint32_t>(n);
    vals_in_ = DeviceBuffer<int32_t>(n);
    vals_out_ = DeviceBuffer<int32_t>(n);
  }
  const size_t temp = std::max<size_t>(sort_temp_bytes(std::max<int64_t>(tokens, 1), embedding_sort_bits(v)), 1);
  if (temp > sort_temp_.bytes()) sort_temp_ = DeviceBuffer<unsigned char>(temp);
  max_tokens_ = tokens;
  vocab_ = v;
}

size_t TransformerOps::scratch_bytes() const {
  return keys_in_.bytes() + keys_out_.bytes() + vals_in_.bytes() + vals_out_.bytes() + sort_temp_.bytes();
}

}  // namespace amp::cuda
