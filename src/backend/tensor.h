// Tensor views (pointer + dtype + 2-D shape, no ownership) and Buffer (owned backend memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/dtype.h"
#include "core/tensor_span.h"

namespace amp {

// A row-major matrix view. Vectors are 1 x n. Memory belongs to the backend that made it.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::F32;
  size_t rows = 0, cols = 0;

  size_t numel() const { return rows * cols; }
  size_t bytes() const { return numel() * dtype_size(dtype); }
  template <typename T>
  T* as() const { return static_cast<T*>(data); }
  // Rows [r0, r0 + n) of this matrix.
  Tensor row_slice(size_t r0, size_t n) const {
    return Tensor{static_cast<char*>(data) + r0 * cols * dtype_size(dtype), dtype, n, cols};
  }
};

// Owned backend memory (host memory for the CPU backend, device memory for CUDA). Move-only.
class Buffer {
 public:
  Buffer() = default;
  Buffer(void* p, size_t bytes, std::function<void(void*)> release)
      : ptr_(p, std::move(release)), bytes_(bytes) {}
  void* data() const { return ptr_.get(); }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_.get()); }
  Tensor tensor(DType t, size_t rows, size_t cols, size_t byte_offset = 0) const {
    return Tensor{static_cast<char*>(ptr_.get()) + byte_offset, t, rows, cols};
  }

 private:
  std::unique_ptr<void, std::function<void(void*)>> ptr_{nullptr, [](void*) {}};
  size_t bytes_ = 0;
};

}  // namespace amp
