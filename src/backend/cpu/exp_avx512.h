// The vector type of vec_math.h for AVX-512F (16 lanes, mask registers) and tmath::exp_f32 on it
// (arguments <= 0), for the AVX-512 files only (attention_avx512.cpp, row_kernels_avx512.cpp):
// included after their `#pragma GCC target("avx512f")`, inside their anonymous namespace, so that
// nothing compiled for AVX-512 can stand in for another file's function. The same operations as the AVX2 forms of
// transformer_rows.h: the same bits.
// No include guard: each including file's anonymous namespace gets its own copy.

struct V16 {
  using Vec = __m512;
  using IVec = __m512i;
  using Mask = __mmask16;
  static Vec set1(float x) { return _mm512_set1_ps(x); }
  static Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  static Vec div(Vec a, Vec b) { return _mm512_div_ps(a, b); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static Vec max(Vec a, Vec b) { return _mm512_max_ps(a, b); }
  static IVec cvtt(Vec a) { return _mm512_cvttps_epi32(a); }
  static Vec cvt(IVec a) { return _mm512_cvtepi32_ps(a); }
  static IVec iset1(int32_t x) { return _mm512_set1_epi32(x); }
  static IVec iadd(IVec a, IVec b) { return _mm512_add_epi32(a, b); }
  static IVec isub(IVec a, IVec b) { return _mm512_sub_epi32(a, b); }
  static IVec srai(IVec a, unsigned n) { return _mm512_srai_epi32(a, n); }
  static IVec slli(IVec a, unsigned n) { return _mm512_slli_epi32(a, n); }
  static Vec as_float(IVec a) { return _mm512_castsi512_ps(a); }
  static Mask ge(Vec a, Vec b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
  static Mask lt(Vec a, Vec b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static Mask eq(Vec a, Vec b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
  static Mask unord(Vec a, Vec b) { return _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q); }
  static Vec blend(Mask m, Vec a, Vec b) { return _mm512_mask_blend_ps(m, a, b); }
  static Vec neg_abs(Vec a) {
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), _mm512_set1_epi32(int32_t(0x80000000u))));
  }
  static constexpr bool kScalef = true;
  static Vec trunc(Vec a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
  static Vec scalef(Vec a, Vec b) { return _mm512_scalef_ps(a, b); }
};

#include "backend/cpu/vec_math.h"

inline __m512 exp_f32_16_nonpositive(__m512 x) { return exp_nonpositive_v<V16>(x); }
