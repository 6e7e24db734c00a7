// Internals of the bulk conversions (convert.cpp): the x86 SIMD kernels, compiled per target in
// convert_f16c.cpp (F16C + AVX2) and convert_avx512.cpp (AVX-512F/BW, AVX-512-BF16), and what they
// share (streaming stores). Nothing outside src/core/convert*.cpp includes this.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#define AMP_CONVERT_X86 1
// GCC 12's AVX-512 headers build "undefined" vectors as `__m512i __Y = __Y;`, which
// -Wmaybe-uninitialized reports at every inlined use (GCC bug 105593, fixed in 12.3). The
// pragma covers only the header's own lines: diagnostics are filtered by location.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace amp::convert_detail {

#if AMP_CONVERT_X86

// Streaming (non-temporal) stores skip the read-for-ownership of the destination lines, which is
// a quarter (f32->16) to two fifths (16->f32) of the memory traffic of a plain-store conversion
// once the arrays no longer fit in the caches. Below this many bytes moved (read + written) the destination is likely to be read
// again soon, so it is kept in cache with plain stores. Measured on a 32 MiB-L3 EPYC: streaming
// halves 16->32 throughput at 18 MiB moved and gains 20-70% from 36 MiB on (bench_convert).
constexpr size_t kStreamMinBytes = size_t{32} << 20;
constexpr size_t kStreamAlign = 64;

// Elements to convert with plain stores before dst reaches a 64-byte boundary; SIZE_MAX when dst
// is not even aligned to its element size (then it can never be, and streaming is skipped).
template <typename T>
inline size_t elements_to_alignment(const T* dst) {
  const auto addr = reinterpret_cast<uintptr_t>(dst);
  if (addr % sizeof(T) != 0) return SIZE_MAX;
  return ((kStreamAlign - addr % kStreamAlign) % kStreamAlign) / sizeof(T);
}

// Runs kernel<false> on the unaligned head and kernel<true> (streaming stores) on the rest.
template <typename S, typename D>
inline bool run_streaming(void (*plain)(const S*, D*, size_t), void (*stream)(const S*, D*, size_t),
                   const S* src, D* dst, size_t n) {
  if (n * (sizeof(S) + sizeof(D)) < kStreamMinBytes) return false;
  const size_t head = elements_to_alignment(dst);
  if (head >= n) return false;
  plain(src, dst, head);
  stream(src + head, dst + head, n - head);
  _mm_sfence();  // streaming stores are weakly ordered: make them visible before returning
  return true;
}

constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;


// F16C + AVX2 (convert_f16c.cpp)
void f32_to_f16_f16c(const float* src, uint16_t* dst, size_t n);
void f16_to_f32_f16c(const uint16_t* src, float* dst, size_t n);
void f32_to_bf16_f16c(const float* src, uint16_t* dst, size_t n);
void bf16_to_f32_f16c(const uint16_t* src, float* dst, size_t n);
void f16_widen_add_f16c(const uint16_t* src, float* acc, size_t n);
void bf16_widen_add_f16c(const uint16_t* src, float* acc, size_t n);

// AVX-512F/BW and AVX-512-BF16 (convert_avx512.cpp)
void f32_to_f16_avx512(const float* src, uint16_t* dst, size_t n);
void f16_to_f32_avx512(const uint16_t* src, float* dst, size_t n);
void f32_to_bf16_avx512(const float* src, uint16_t* dst, size_t n);
void bf16_to_f32_avx512(const uint16_t* src, float* dst, size_t n);
void f32_to_bf16_avx512bf16(const float* src, uint16_t* dst, size_t n);
void f16_widen_add_avx512(const uint16_t* src, float* acc, size_t n);
void bf16_widen_add_avx512(const uint16_t* src, float* acc, size_t n);
// out = round(a + b) in 16 lanes (out may be a or b): FP16; BF16 with the integer rounding or vcvtneps2bf16.
void f16_add_avx512(const uint16_t* a, const uint16_t* b, uint16_t* out, size_t n);
void bf16_add_avx512(const uint16_t* a, const uint16_t* b, uint16_t* out, size_t n);
void bf16_add_avx512bf16(const uint16_t* a, const uint16_t* b, uint16_t* out, size_t n);
#endif

}  // namespace amp::convert_detail
