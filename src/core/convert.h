// Bulk conversions between float and the 16-bit formats. Every path (portable, F16C/AVX2,
// AVX-512F, AVX-512-BF16) gives the same bits as the scalar reference in core/half.h on every
// input, subnormals and NaN included; the fastest path this CPU supports is chosen at run time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace amp {

void f32_to_f16(const float* src, uint16_t* dst, size_t n);
void f16_to_f32(const uint16_t* src, float* dst, size_t n);
void f32_to_bf16(const float* src, uint16_t* dst, size_t n);
void bf16_to_f32(const uint16_t* src, float* dst, size_t n);

// Any float dtype to any float dtype (f32, f16, bf16); same dtype is a copy. 16 <-> 16 goes
// through float, which is exact for every value representable in both.
void convert(const void* src, DType src_type, void* dst, DType dst_type, size_t n);

// The same, split over the OpenMP threads of the caller for large n.
void convert_parallel(const void* src, DType src_type, void* dst, DType dst_type, size_t n);

// acc[i] += float(src[i]) (one FP32 addition each) for src f32, f16 or bf16: a column sum's step
// over one row (bias and embedding gradients, row_sum) without widening the row into a buffer
// first. The widened value is the bulk conversion's, so the bits are those of convert() followed
// by the addition.
void widen_add(const void* src, DType src_type, float* acc, size_t n);

// out[i] = round(float(a[i]) + float(b[i])) for 16-bit a, b (out may be a or b): the combining step
// of a 16-bit sum (FP32 arithmetic, one rounding) as the all-reduce's user-defined MPI ops use it
// (f16_add, bf16_add: b += a), and the CPU add op's 16-bit sums. Bit-identical to the scalar
// conversions of core/half.h around a float addition.
void f16_sum(const uint16_t* a, const uint16_t* b, uint16_t* out, size_t n);
void bf16_sum(const uint16_t* a, const uint16_t* b, uint16_t* out, size_t n);
inline void f16_add(const uint16_t* a, uint16_t* b, size_t n) { f16_sum(a, b, b, n); }
inline void bf16_add(const uint16_t* a, uint16_t* b, size_t n) { bf16_sum(a, b, b, n); }

// One set of conversion kernels; tests and benchmarks iterate over every path this CPU runs.
struct ConvertKernels {
  std::string name;  // "scalar", "f16c", "avx512", "avx512bf16"
  void (*f32_to_f16)(const float*, uint16_t*, size_t);
  void (*f16_to_f32)(const uint16_t*, float*, size_t);
  void (*f32_to_bf16)(const float*, uint16_t*, size_t);
  void (*bf16_to_f32)(const uint16_t*, float*, size_t);
  // acc[i] += the widened src[i] (widen_add's 16-bit cases).
  void (*f16_widen_add)(const uint16_t* src, float* acc, size_t n);
  void (*bf16_widen_add)(const uint16_t* src, float* acc, size_t n);
};

// Every path the running CPU supports, slowest (scalar) first.
const std::vector<ConvertKernels>& available_convert_kernels();
// The path the public functions above use.
const ConvertKernels& active_convert_kernels();

}  // namespace amp
