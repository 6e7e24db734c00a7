// The F16C + AVX2 conversions (8 lanes), bit-identical to core/half.h.
#include "core/convert_simd.h"

#if AMP_CONVERT_X86

#include <algorithm>

#include "core/half.h"

namespace amp::convert_detail {

namespace {


// ---- F16C + AVX2 (8 lanes) ------------------------------------------------------------------
// vcvtps2ph / vcvtph2ps match half.h on every input, NaNs included (both quiet a signalling NaN
// and keep the top payload bits), and ignore MXCSR.DAZ/FTZ, so no lane needs fixing up (checked
// exhaustively on the 16->32 side; test_convert.cpp re-checks every path, with DAZ/FTZ too).
#define AMP_TARGET_F16C __attribute__((target("avx2,f16c")))

AMP_TARGET_F16C inline void store_256(void* p, __m256i v, bool stream) {
  if (stream)
    _mm256_stream_si256(static_cast<__m256i*>(p), v);
  else
    _mm256_storeu_si256(static_cast<__m256i*>(p), v);
}

template <bool Stream>
AMP_TARGET_F16C void f32_to_f16_f16c_run(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {  // 64 bytes of output: one full line per iteration
    const __m128i a = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), kRne);
    const __m128i b = _mm256_cvtps_ph(_mm256_loadu_ps(src + i + 8), kRne);
    const __m128i c = _mm256_cvtps_ph(_mm256_loadu_ps(src + i + 16), kRne);
    const __m128i d = _mm256_cvtps_ph(_mm256_loadu_ps(src + i + 24), kRne);
    store_256(dst + i, _mm256_set_m128i(b, a), Stream);
    store_256(dst + i + 16, _mm256_set_m128i(d, c), Stream);
  }
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), kRne));
  for (; i < n; ++i) dst[i] = float_to_half_bits(src[i]);
}

template <bool Stream>
AMP_TARGET_F16C void f16_to_f32_f16c_run(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    const __m256 b =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 8)));
    store_256(dst + i, _mm256_castps_si256(a), Stream);
    store_256(dst + i + 8, _mm256_castps_si256(b), Stream);
  }
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = half_bits_to_float(src[i]);
}

// float bits -> bf16 bits in the low half of each 32-bit lane: RNE on the dropped 16 bits, and
// for NaN the truncated bits with the quiet bit set (float_to_bf16_bits).
AMP_TARGET_F16C inline __m256i bf16_bits_avx2(__m256i x) {
  const __m256i hi = _mm256_srli_epi32(x, 16);
  const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
  // |x| <= 0x7fffffff, so the signed compare is exact.
  const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                            _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, is_nan);
}

template <bool Stream>
AMP_TARGET_F16C void f32_to_bf16_f16c_run(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = bf16_bits_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m256i b =
        bf16_bits_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 8)));
    // packus works per 128-bit lane ([a0-3 b0-3 a4-7 b4-7]); the permute restores the order.
    // Values are <= 0xffff, so the unsigned saturation never changes them.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
    store_256(dst + i, packed, Stream);
  }
  for (; i < n; ++i) dst[i] = float_to_bf16_bits(src[i]);
}

AMP_TARGET_F16C inline __m256i bf16_widen_avx2(__m128i b) {
  const __m256i x = _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16);
  const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                            _mm256_set1_epi32(0x7f800000));
  return _mm256_or_si256(x, _mm256_and_si256(is_nan, _mm256_set1_epi32(0x400000)));
}

template <bool Stream>
AMP_TARGET_F16C void bf16_to_f32_f16c_run(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = bf16_widen_avx2(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    const __m256i b =
        bf16_widen_avx2(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 8)));
    store_256(dst + i, a, Stream);
    store_256(dst + i + 8, b, Stream);
  }
  for (; i < n; ++i) dst[i] = bf16_bits_to_float(src[i]);
}



}  // namespace

void f32_to_f16_f16c(const float* src, uint16_t* dst, size_t n) {
  if (!run_streaming(f32_to_f16_f16c_run<false>, f32_to_f16_f16c_run<true>, src, dst, n))
    f32_to_f16_f16c_run<false>(src, dst, n);
}

void f16_to_f32_f16c(const uint16_t* src, float* dst, size_t n) {
  if (!run_streaming(f16_to_f32_f16c_run<false>, f16_to_f32_f16c_run<true>, src, dst, n))
    f16_to_f32_f16c_run<false>(src, dst, n);
}

void f32_to_bf16_f16c(const float* src, uint16_t* dst, size_t n) {
  if (!run_streaming(f32_to_bf16_f16c_run<false>, f32_to_bf16_f16c_run<true>, src, dst, n))
    f32_to_bf16_f16c_run<false>(src, dst, n);
}

void bf16_to_f32_f16c(const uint16_t* src, float* dst, size_t n) {
  if (!run_streaming(bf16_to_f32_f16c_run<false>, bf16_to_f32_f16c_run<true>, src, dst, n))
    bf16_to_f32_f16c_run<false>(src, dst, n);
}

// acc += widen(8 values of src) (the conversions' widening above), the tail by the scalar
// reference.
namespace {  // this ISA's own (no inline function merged with another file's)

AMP_TARGET_F16C inline __m256 widen_f16(__m128i h) { return _mm256_cvtph_ps(h); }
AMP_TARGET_F16C inline __m256 widen_bf16(__m128i b) { return _mm256_castsi256_ps(bf16_widen_avx2(b)); }

template <__m256 (*Widen)(__m128i), float (*Scalar)(uint16_t)>
AMP_TARGET_F16C void widen_add_run(const uint16_t* src, float* acc, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = Widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), x));
  }
  for (; i < n; ++i) acc[i] += Scalar(src[i]);
}

}  // namespace

void f16_widen_add_f16c(const uint16_t* src, float* acc, size_t n) {
  widen_add_run<widen_f16, half_bits_to_float>(src, acc, n);
}
void bf16_widen_add_f16c(const uint16_t* src, float* acc, size_t n) {
  widen_add_run<widen_bf16, bf16_bits_to_float>(src, acc, n);
}

}  // namespace amp::convert_detail

#endif  // AMP_CONVERT_X86
