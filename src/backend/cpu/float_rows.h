// Rows of FP32, FP16 or BF16 data as the CPU kernels see them: floats. FP32 data is used in place
// (no copy); 16-bit data converts through the caller's scratch row, and results round once into
// their destination.
#pragma once

#include <cstdint>

#include "core/convert.h"
#include "core/dtype.h"

namespace amp::cpu {

inline const char* at(const void* p, DType t, int64_t i) {
  return static_cast<const char*>(p) + i * int64_t(dtype_size(t));
}
inline char* at(void* p, DType t, int64_t i) { return static_cast<char*>(p) + i * int64_t(dtype_size(t)); }

// The n values at element `off` of p as floats: p's own memory when FP32, else converted into buf.
inline const float* row_in(const void* p, DType t, int64_t off, int64_t n, float* buf) {
  if (t == DType::F32) return reinterpret_cast<const float*>(at(p, t, off));
  convert(at(p, t, off), t, buf, DType::F32, size_t(n));
  return buf;
}

// Where to write floats bound for element `off` of p: p's own memory when FP32, else buf, which
// row_store then rounds into p. Writing in place is safe wherever the kernel reads each element
// before writing it (elementwise, or a row read whole first).
inline float* row_out(void* p, DType t, int64_t off, float* buf) {
  return t == DType::F32 ? reinterpret_cast<float*>(at(p, t, off)) : buf;
}
inline void row_store(const float* buf, void* p, DType t, int64_t off, int64_t n) {
  if (t != DType::F32) convert(buf, DType::F32, at(p, t, off), t, size_t(n));
}

}  // namespace amp::cpu
