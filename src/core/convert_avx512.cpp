// The AVX-512F/BW conversions and 16-bit sums (16 lanes), and AVX-512-BF16's vcvtneps2bf16 with
// its subnormal fix-up, bit-identical to core/half.h.
#include "core/convert_simd.h"

#if AMP_CONVERT_X86

#include <algorithm>

#include "core/bf16_avx512.h"
#include "core/half.h"
#include "core/prefetch.h"

namespace amp::convert_detail {

namespace {


// ---- AVX-512F/BW (16 lanes) -----------------------------------------------------------------
// Tails use masked loads and stores (masked-off lanes never fault). Only F and BW instructions
// are used (16-bit masked moves go through the 512-bit forms), so VL is not required.
#define AMP_TARGET_AVX512 __attribute__((target("avx512f,avx512bw")))
#define AMP_TARGET_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512bf16")))

AMP_TARGET_AVX512 inline void store_512(void* p, __m512i v, bool stream) {
  if (stream)
    _mm512_stream_si512(static_cast<__m512i*>(p), v);
  else
    _mm512_storeu_si512(p, v);
}

AMP_TARGET_AVX512 inline __mmask16 tail_mask16(size_t k) {  // k in [1, 16]
  return static_cast<__mmask16>((1u << k) - 1u);
}

AMP_TARGET_AVX512 inline __m256i load_16x16(const uint16_t* p, __mmask16 m) {
  return _mm512_castsi512_si256(_mm512_maskz_loadu_epi16(m, p));
}

AMP_TARGET_AVX512 inline void store_16x16(uint16_t* p, __mmask16 m, __m256i v) {
  _mm512_mask_storeu_epi16(p, m, _mm512_castsi256_si512(v));
}

AMP_TARGET_AVX512 inline __m512i join_256(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

template <bool Stream>
AMP_TARGET_AVX512 void f32_to_f16_avx512_run(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    prefetch_ahead(src + i), prefetch_ahead(src + i + 16);  // two lines of floats
    const __m256i a = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), kRne);
    const __m256i b = _mm512_cvtps_ph(_mm512_loadu_ps(src + i + 16), kRne);
    store_512(dst + i, join_256(a, b), Stream);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask16(std::min<size_t>(16, n - i));
    store_16x16(dst + i, m, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), kRne));
  }
}

template <bool Stream>
AMP_TARGET_AVX512 void f16_to_f32_avx512_run(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    prefetch_ahead(src + i);  // one line of 16-bit values
    const __m512i v = _mm512_loadu_si512(src + i);
    const __m512 a = _mm512_cvtph_ps(_mm512_castsi512_si256(v));
    const __m512 b = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1));
    store_512(dst + i, _mm512_castps_si512(a), Stream);
    store_512(dst + i + 16, _mm512_castps_si512(b), Stream);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask16(std::min<size_t>(16, n - i));
    _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(load_16x16(src + i, m)));
  }
}

// bf16_bits_avx512 and bf16_widen_avx512 (core/bf16_avx512.h): bf16_bits_avx2's rule on 16 lanes.

template <bool Stream>
AMP_TARGET_AVX512 void f32_to_bf16_avx512_run(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    prefetch_ahead(src + i), prefetch_ahead(src + i + 16);  // two lines of floats
    const __m256i a = bf16_bits_avx512(_mm512_loadu_si512(src + i));
    const __m256i b = bf16_bits_avx512(_mm512_loadu_si512(src + i + 16));
    store_512(dst + i, join_256(a, b), Stream);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask16(std::min<size_t>(16, n - i));
    store_16x16(dst + i, m, bf16_bits_avx512(_mm512_maskz_loadu_epi32(m, src + i)));
  }
}

template <bool Stream>
AMP_TARGET_AVX512 void bf16_to_f32_avx512_run(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    prefetch_ahead(src + i);  // one line of 16-bit values
    const __m512i v = _mm512_loadu_si512(src + i);
    store_512(dst + i, bf16_widen_avx512(_mm512_castsi512_si256(v)), Stream);
    store_512(dst + i + 16, bf16_widen_avx512(_mm512_extracti64x4_epi64(v, 1)), Stream);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask16(std::min<size_t>(16, n - i));
    _mm512_mask_storeu_epi32(dst + i, m, bf16_widen_avx512(load_16x16(src + i, m)));
  }
}

// ---- AVX-512-BF16: vcvtneps2bf16 ------------------------------------------------------------
// The instruction rounds to nearest even and quiets NaNs exactly like float_to_bf16_bits, but it
// treats subnormal inputs as zero (DAZ, whatever MXCSR says), where the reference rounds them to
// a bf16 subnormal (or the smallest normal). Lanes with a nonzero subnormal input take the
// integer result instead; zeros are excluded so that all-zero data never leaves the fast path.
AMP_TARGET_AVX512BF16 inline __m256i bf16_bits_avx512bf16(__m512i x) {
  __m256i r = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_castsi512_ps(x)));
  // |x| - 1 < 0x7fffff (unsigned) <=> 0 < |x| < 2^-126 (0 wraps to 0xffffffff).
  const __m512i mag_minus_1 =
      _mm512_sub_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(1));
  const __mmask16 subnormal = _mm512_cmplt_epu32_mask(mag_minus_1, _mm512_set1_epi32(0x7fffff));
  if (subnormal != 0) {
    const __m512i fixed = _mm512_mask_mov_epi16(_mm512_castsi256_si512(r), subnormal,
                                                _mm512_castsi256_si512(bf16_bits_avx512(x)));
    r = _mm512_castsi512_si256(fixed);
  }
  return r;
}

template <bool Stream>
AMP_TARGET_AVX512BF16 void f32_to_bf16_avx512bf16_run(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    prefetch_ahead(src + i), prefetch_ahead(src + i + 16);  // two lines of floats
    const __m256i a = bf16_bits_avx512bf16(_mm512_loadu_si512(src + i));
    const __m256i b = bf16_bits_avx512bf16(_mm512_loadu_si512(src + i + 16));
    store_512(dst + i, join_256(a, b), Stream);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask16(std::min<size_t>(16, n - i));
    store_16x16(dst + i, m, bf16_bits_avx512bf16(_mm512_maskz_loadu_epi32(m, src + i)));
  }
}

// ---- 16-bit sums: out = round(a + b), widening both, adding in FP32, rounding once -------------
// Full vectors use plain loads and stores: masked 16-bit stores are slow on some CPUs (Zen 4),
// so masks only serve the tail.
AMP_TARGET_AVX512 inline __m512 add16_lanes_f16(__m256i a, __m256i b) {
  return _mm512_add_ps(_mm512_cvtph_ps(a), _mm512_cvtph_ps(b));
}

AMP_TARGET_AVX512 void f16_add_run(const uint16_t* a, const uint16_t* b, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 s = add16_lanes_f16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i)),
                                     _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtps_ph(s, kRne));
  }
  if (i < n) {
    const __mmask16 m = tail_mask16(n - i);
    store_16x16(out + i, m, _mm512_cvtps_ph(add16_lanes_f16(load_16x16(a + i, m), load_16x16(b + i, m)), kRne));
  }
}

// bf16 -> float for an addition: a plain shift (the addition itself quiets a signalling NaN).
AMP_TARGET_AVX512 inline __m512 bf16_lanes_for_add(__m256i v) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

// kHw: round with vcvtneps2bf16 (and its subnormal fix-up) or with the integer sequence. The
// function carries the AVX-512-BF16 target for the kHw instantiation; the other one holds no
// BF16 intrinsic, and the compiler emits that instruction only from the intrinsic.
template <bool kHw>
AMP_TARGET_AVX512BF16 inline __m256i round_bf16_lanes(__m512i x) {
  return kHw ? bf16_bits_avx512bf16(x) : bf16_bits_avx512(x);
}

template <bool kHw>
AMP_TARGET_AVX512BF16 void bf16_add_run(const uint16_t* a, const uint16_t* b, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 s = _mm512_add_ps(bf16_lanes_for_add(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i))),
                                   bf16_lanes_for_add(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i))));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), round_bf16_lanes<kHw>(_mm512_castps_si512(s)));
  }
  if (i < n) {
    const __mmask16 m = tail_mask16(n - i);
    const __m512 s = _mm512_add_ps(bf16_lanes_for_add(load_16x16(a + i, m)), bf16_lanes_for_add(load_16x16(b + i, m)));
    store_16x16(out + i, m, round_bf16_lanes<kHw>(_mm512_castps_si512(s)));
  }
}



}  // namespace

void f32_to_f16_avx512(const float* src, uint16_t* dst, size_t n) {
  if (!run_streaming(f32_to_f16_avx512_run<false>, f32_to_f16_avx512_run<true>, src, dst, n))
    f32_to_f16_avx512_run<false>(src, dst, n);
}

void f16_to_f32_avx512(const uint16_t* src, float* dst, size_t n) {
  if (!run_streaming(f16_to_f32_avx512_run<false>, f16_to_f32_avx512_run<true>, src, dst, n))
    f16_to_f32_avx512_run<false>(src, dst, n);
}

void f32_to_bf16_avx512(const float* src, uint16_t* dst, size_t n) {
  if (!run_streaming(f32_to_bf16_avx512_run<false>, f32_to_bf16_avx512_run<true>, src, dst, n))
    f32_to_bf16_avx512_run<false>(src, dst, n);
}

void bf16_to_f32_avx512(const uint16_t* src, float* dst, size_t n) {
  if (!run_streaming(bf16_to_f32_avx512_run<false>, bf16_to_f32_avx512_run<true>, src, dst, n))
    bf16_to_f32_avx512_run<false>(src, dst, n);
}

void f32_to_bf16_avx512bf16(const float* src, uint16_t* dst, size_t n) {
  if (!run_streaming(f32_to_bf16_avx512bf16_run<false>, f32_to_bf16_avx512bf16_run<true>, src,
                     dst, n))
    f32_to_bf16_avx512bf16_run<false>(src, dst, n);
}

void f16_add_avx512(const uint16_t* a, const uint16_t* b, uint16_t* out, size_t n) { f16_add_run(a, b, out, n); }
void bf16_add_avx512(const uint16_t* a, const uint16_t* b, uint16_t* out, size_t n) {
  bf16_add_run<false>(a, b, out, n);
}
void bf16_add_avx512bf16(const uint16_t* a, const uint16_t* b, uint16_t* out, size_t n) {
  bf16_add_run<true>(a, b, out, n);
}

// acc += widen(16 values of src) (the widening of f16_to_f32_avx512_run / bf16_to_f32_avx512_run):
// plain loads and stores in the body, masked ones for the tail only (masked stores in every step
// ran at a third of the speed on Zen 5).
namespace {  // this ISA's own (no inline function merged with another file's)

AMP_TARGET_AVX512 inline __m512 widen_f16(__m256i h) { return _mm512_cvtph_ps(h); }
AMP_TARGET_AVX512 inline __m512 widen_bf16(__m256i b) { return _mm512_castsi512_ps(bf16_widen_avx512(b)); }

template <__m512 (*Widen)(__m256i)>
AMP_TARGET_AVX512 void widen_add_run(const uint16_t* src, float* acc, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = Widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm512_storeu_ps(acc + i, _mm512_add_ps(_mm512_loadu_ps(acc + i), x));
  }
  if (i < n) {
    const __mmask16 m = tail_mask16(n - i);
    _mm512_mask_storeu_ps(acc + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, acc + i), Widen(load_16x16(src + i, m))));
  }
}

}  // namespace

void f16_widen_add_avx512(const uint16_t* src, float* acc, size_t n) { widen_add_run<widen_f16>(src, acc, n); }
void bf16_widen_add_avx512(const uint16_t* src, float* acc, size_t n) { widen_add_run<widen_bf16>(src, acc, n); }

}  // namespace amp::convert_detail

#endif  // AMP_CONVERT_X86
