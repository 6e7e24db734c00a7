// Bulk float <-> f16/bf16 conversion kernels (scalar, F16C/AVX2, AVX-512F/BW, AVX-512-BF16), the
// run-time choice between them, and the dtype-generic convert() / convert_parallel() built on them.
// Every vector path is checked lane for lane against core/half.h by tests/unit/test_convert.cpp.
#include "core/convert.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/half.h"

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

namespace amp {
namespace {

// ---- scalar: the reference itself -----------------------------------------------------------

void f32_to_f16_scalar(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = float_to_half_bits(src[i]);
}
void f16_to_f32_scalar(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = half_bits_to_float(src[i]);
}
void f32_to_bf16_scalar(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = float_to_bf16_bits(src[i]);
}
void bf16_to_f32_scalar(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_float(src[i]);
}

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
size_t elements_to_alignment(const T* dst) {
  const auto addr = reinterpret_cast<uintptr_t>(dst);
  if (addr % sizeof(T) != 0) return SIZE_MAX;
  return ((kStreamAlign - addr % kStreamAlign) % kStreamAlign) / sizeof(T);
}

// Runs kernel<false> on the unaligned head and kernel<true> (streaming stores) on the rest.
template <typename S, typename D>
bool run_streaming(void (*plain)(const S*, D*, size_t), void (*stream)(const S*, D*, size_t),
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

// Same rule as bf16_bits_avx2, 16 lanes, narrowed to 16 bits.
AMP_TARGET_AVX512 inline __m256i bf16_bits_avx512(__m512i x) {
  const __m512i hi = _mm512_srli_epi32(x, 16);
  const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(
      _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_cvtepi32_epi16(
      _mm512_mask_or_epi32(rounded, is_nan, hi, _mm512_set1_epi32(0x40)));
}

template <bool Stream>
AMP_TARGET_AVX512 void f32_to_bf16_avx512_run(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i a = bf16_bits_avx512(_mm512_loadu_si512(src + i));
    const __m256i b = bf16_bits_avx512(_mm512_loadu_si512(src + i + 16));
    store_512(dst + i, join_256(a, b), Stream);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask16(std::min<size_t>(16, n - i));
    store_16x16(dst + i, m, bf16_bits_avx512(_mm512_maskz_loadu_epi32(m, src + i)));
  }
}

AMP_TARGET_AVX512 inline __m512i bf16_widen_avx512(__m256i b) {
  const __m512i x = _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16);
  const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(
      _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_or_epi32(x, is_nan, x, _mm512_set1_epi32(0x400000));
}

template <bool Stream>
AMP_TARGET_AVX512 void bf16_to_f32_avx512_run(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
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
    const __m256i a = bf16_bits_avx512bf16(_mm512_loadu_si512(src + i));
    const __m256i b = bf16_bits_avx512bf16(_mm512_loadu_si512(src + i + 16));
    store_512(dst + i, join_256(a, b), Stream);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask16(std::min<size_t>(16, n - i));
    store_16x16(dst + i, m, bf16_bits_avx512bf16(_mm512_maskz_loadu_epi32(m, src + i)));
  }
}

// ---- 16-bit sums: b = round(a + b), widening both, adding in FP32, rounding once -------------
// Full vectors use plain loads and stores: masked 16-bit stores are slow on some CPUs (Zen 4),
// so masks only serve the tail.
AMP_TARGET_AVX512 inline __m512 add16_lanes_f16(__m256i a, __m256i b) {
  return _mm512_add_ps(_mm512_cvtph_ps(a), _mm512_cvtph_ps(b));
}

AMP_TARGET_AVX512 void f16_add_avx512(const uint16_t* a, uint16_t* b, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 s = add16_lanes_f16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i)),
                                     _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(b + i), _mm512_cvtps_ph(s, kRne));
  }
  if (i < n) {
    const __mmask16 m = tail_mask16(n - i);
    store_16x16(b + i, m, _mm512_cvtps_ph(add16_lanes_f16(load_16x16(a + i, m), load_16x16(b + i, m)), kRne));
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
AMP_TARGET_AVX512BF16 void bf16_add_run(const uint16_t* a, uint16_t* b, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 s = _mm512_add_ps(bf16_lanes_for_add(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i))),
                                   bf16_lanes_for_add(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i))));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(b + i), round_bf16_lanes<kHw>(_mm512_castps_si512(s)));
  }
  if (i < n) {
    const __mmask16 m = tail_mask16(n - i);
    const __m512 s = _mm512_add_ps(bf16_lanes_for_add(load_16x16(a + i, m)), bf16_lanes_for_add(load_16x16(b + i, m)));
    store_16x16(b + i, m, round_bf16_lanes<kHw>(_mm512_castps_si512(s)));
  }
}

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

#endif  // AMP_CONVERT_X86

std::vector<ConvertKernels> detect_kernels() {
  std::vector<ConvertKernels> ks;
  ks.push_back({"scalar", f32_to_f16_scalar, f16_to_f32_scalar, f32_to_bf16_scalar,
                bf16_to_f32_scalar});
#if AMP_CONVERT_X86
  // __builtin_cpu_supports also checks that the OS saves the AVX / AVX-512 register state.
  __builtin_cpu_init();  // harmless if done already; needed when called from a static initializer
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c"))
    ks.push_back({"f16c", f32_to_f16_f16c, f16_to_f32_f16c, f32_to_bf16_f16c, bf16_to_f32_f16c});
  if (avx512)
    ks.push_back({"avx512", f32_to_f16_avx512, f16_to_f32_avx512, f32_to_bf16_avx512,
                  bf16_to_f32_avx512});
  if (avx512 && __builtin_cpu_supports("avx512bf16"))
    ks.push_back({"avx512bf16", f32_to_f16_avx512, f16_to_f32_avx512, f32_to_bf16_avx512bf16,
                  bf16_to_f32_avx512});
#endif
  return ks;
}

bool is_float_dtype(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

void check_dtypes(DType src_type, DType dst_type) {
  if (!is_float_dtype(src_type) || !is_float_dtype(dst_type))
    throw Error(ErrorKind::Internal, strcat("convert: unsupported dtype pair ",
                                            dtype_name(src_type), " -> ", dtype_name(dst_type),
                                            " (only f32, f16, bf16)"));
}

// Below this many elements the fork/join of an OpenMP region costs more than it saves.
constexpr size_t kParallelMinElements = size_t{1} << 16;
// Chunk boundaries are multiples of this, so every thread but the last runs whole vectors and
// no two threads write the same cache line (64 elements >= 64 bytes for every dtype).
constexpr size_t kParallelGrain = 64;

}  // namespace

const std::vector<ConvertKernels>& available_convert_kernels() {
  static const std::vector<ConvertKernels> kernels = detect_kernels();
  return kernels;
}

const ConvertKernels& active_convert_kernels() {
  static const ConvertKernels& active = available_convert_kernels().back();
  return active;
}

void f32_to_f16(const float* src, uint16_t* dst, size_t n) {
  active_convert_kernels().f32_to_f16(src, dst, n);
}
void f16_to_f32(const uint16_t* src, float* dst, size_t n) {
  active_convert_kernels().f16_to_f32(src, dst, n);
}
void f32_to_bf16(const float* src, uint16_t* dst, size_t n) {
  active_convert_kernels().f32_to_bf16(src, dst, n);
}
void bf16_to_f32(const uint16_t* src, float* dst, size_t n) {
  active_convert_kernels().bf16_to_f32(src, dst, n);
}

void convert(const void* src, DType src_type, void* dst, DType dst_type, size_t n) {
  check_dtypes(src_type, dst_type);
  if (n == 0) return;
  if (src_type == dst_type) {
    if (src != dst) std::memcpy(dst, src, n * dtype_size(src_type));
    return;
  }
  const ConvertKernels& k = active_convert_kernels();
  const auto to_f32 = src_type == DType::F16 ? k.f16_to_f32 : k.bf16_to_f32;
  const auto from_f32 = dst_type == DType::F16 ? k.f32_to_f16 : k.f32_to_bf16;
  if (src_type == DType::F32) {
    from_f32(static_cast<const float*>(src), static_cast<uint16_t*>(dst), n);
  } else if (dst_type == DType::F32) {
    to_f32(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n);
  } else {
    // 16 -> 16 through float in chunks that stay in L1 (4 KiB of float).
    const auto* s = static_cast<const uint16_t*>(src);
    auto* d = static_cast<uint16_t*>(dst);
    float buf[1024];
    for (size_t i = 0; i < n; i += 1024) {
      const size_t m = std::min<size_t>(1024, n - i);
      to_f32(s + i, buf, m);
      from_f32(buf, d + i, m);
    }
  }
}

void convert_parallel(const void* src, DType src_type, void* dst, DType dst_type, size_t n) {
  check_dtypes(src_type, dst_type);  // throw here: an exception must not leave an omp region
  if (n < kParallelMinElements || omp_get_max_threads() <= 1 || omp_in_parallel()) {
    convert(src, src_type, dst, dst_type, n);
    return;
  }
  const size_t src_size = dtype_size(src_type);
  const size_t dst_size = dtype_size(dst_type);
  const size_t grains = (n + kParallelGrain - 1) / kParallelGrain;
#pragma omp parallel
  {
    const size_t t = static_cast<size_t>(omp_get_thread_num());
    const size_t nt = static_cast<size_t>(omp_get_num_threads());
    const size_t begin = std::min(n, grains * t / nt * kParallelGrain);
    const size_t end = std::min(n, grains * (t + 1) / nt * kParallelGrain);
    if (end > begin)
      convert(static_cast<const char*>(src) + begin * src_size, src_type,
              static_cast<char*>(dst) + begin * dst_size, dst_type, end - begin);
  }
}

namespace {
// Portable path: widen chunks with the active converters, add, round back.
template <bool kBf16>
void add16_portable(const uint16_t* a, uint16_t* b, size_t n) {
  constexpr size_t kChunk = 256;
  alignas(64) float fa[kChunk], fb[kChunk];
  for (size_t off = 0; off < n; off += kChunk) {
    const size_t len = std::min(kChunk, n - off);
    (kBf16 ? bf16_to_f32 : f16_to_f32)(a + off, fa, len);
    (kBf16 ? bf16_to_f32 : f16_to_f32)(b + off, fb, len);
    for (size_t i = 0; i < len; ++i) fb[i] = fa[i] + fb[i];
    (kBf16 ? f32_to_bf16 : f32_to_f16)(fb, b + off, len);
  }
}

using AddFn = void (*)(const uint16_t*, uint16_t*, size_t);
AddFn pick_add(bool bf16) {
#if AMP_CONVERT_X86
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) {
    if (!bf16) return f16_add_avx512;
    // vcvtneps2bf16 (with its subnormal fix-up) rounds faster than the integer sequence.
    return __builtin_cpu_supports("avx512bf16") ? bf16_add_run<true> : bf16_add_run<false>;
  }
#endif
  return bf16 ? add16_portable<true> : add16_portable<false>;
}
}  // namespace

void f16_add(const uint16_t* a, uint16_t* b, size_t n) {
  static const AddFn fn = pick_add(false);
  fn(a, b, n);
}

void bf16_add(const uint16_t* a, uint16_t* b, size_t n) {
  static const AddFn fn = pick_add(true);
  fn(a, b, n);
}

}  // namespace amp
