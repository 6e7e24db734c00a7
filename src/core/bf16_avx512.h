// 16 BF16 lanes to and from 16 floats with AVX-512F, lane for lane core/half.h's
// bf16_bits_to_float (signalling NaNs quieted) and float_to_bf16_bits (round to nearest even,
// NaNs quieted): shared by the bulk conversions (convert_avx512.cpp) and the kernels that convert
// in their own loops (backend/cpu/row_kernels_avx512.cpp). The target attribute lets files
// compiled for AVX2 include this; only code that runs where the CPU has AVX-512F may call it.
#pragma once

#if defined(__x86_64__) || defined(__i386__)

// GCC 12's AVX-512 headers and -Wmaybe-uninitialized: see core/convert_simd.h (at -O1, as in the
// sanitizer build, the same report comes as -Wuninitialized). This covers the header's lines
// only where this is the first include of immintrin.h.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

namespace amp {

// 16 BF16 bit patterns -> the floats' bit patterns (a NaN gets its quiet bit).
__attribute__((target("avx512f"))) inline __m512i bf16_widen_avx512(__m256i b) {
  const __m512i x = _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16);
  const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                                   _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_or_epi32(x, is_nan, x, _mm512_set1_epi32(0x400000));
}

// 16 floats' bit patterns -> BF16, rounded to nearest even (a NaN keeps its high half, quieted).
__attribute__((target("avx512f"))) inline __m256i bf16_bits_avx512(__m512i x) {
  const __m512i hi = _mm512_srli_epi32(x, 16);
  const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                                   _mm512_set1_epi32(0x7f800000));
  return _mm512_cvtepi32_epi16(_mm512_mask_or_epi32(rounded, is_nan, hi, _mm512_set1_epi32(0x40)));
}

}  // namespace amp

#endif
