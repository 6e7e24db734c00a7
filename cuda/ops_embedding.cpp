// embedding_backward's scratch (cuda/cuda_ops.h): the sort's keys, values and CUB's temporary
// storage, about 16 bytes per token plus CUB's needs, allocated outside any graph capture.
#include <algorithm>

#include "core/error.h"
#include "cuda/cuda_ops.h"
#include "cudart/cuda_check.h"

namespace amp::cuda {

void CudaOps::reserve_embedding(int64_t max_tokens, int64_t vocab) {
  AMP_CHECK(max_tokens >= 0 && max_tokens <= int64_t(INT32_MAX) && vocab >= 0 && vocab < int64_t(INT32_MAX),
            "reserve: max_tokens ", max_tokens, " vocab ", vocab, " out of range");
  not_capturing("reserve_embedding");
  const int64_t tokens = std::max(max_tokens_, max_tokens), v = std::max(vocab_, vocab);
  const size_t temp = std::max<size_t>(sort_temp_bytes(std::max<int64_t>(tokens, 1), embedding_sort_bits(v)), 1);
  const bool grow_keys = !keys_in_.get() || tokens > max_tokens_;
  if (grow_keys || temp > sort_temp_.bytes())  // nothing enqueued may still use them
    wait_stream(stream_, wait_check_ ? *wait_check_ : WaitCheck{});
  if (grow_keys) {
    const size_t n = size_t(std::max<int64_t>(tokens, 1));
    keys_in_ = DeviceBuffer<uint32_t>(n);
    keys_out_ = DeviceBuffer<uint32_t>(n);
    vals_in_ = DeviceBuffer<int32_t>(n);
    vals_out_ = DeviceBuffer<int32_t>(n);
  }
  if (temp > sort_temp_.bytes()) sort_temp_ = DeviceBuffer<unsigned char>(temp);
  max_tokens_ = tokens;
  vocab_ = v;
}

size_t CudaOps::embedding_scratch_bytes() const {
  return keys_in_.bytes() + keys_out_.bytes() + vals_in_.bytes() + vals_out_.bytes() + sort_temp_.bytes();
}

}  // namespace amp::cuda
