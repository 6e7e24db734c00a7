// tmath::exp_f32 on 16 lanes, for the AVX-512 files only (attention_avx512.cpp, row_kernels_avx512.cpp):
// included after their `#pragma GCC target("avx512f")`, inside their anonymous namespace, so that
// nothing compiled for AVX-512 can stand in for another file's function. transformer_rows.h's
// exp_poly8, exp_f32_8 and exp_f32_8_nonpositive operation for operation (the same constants, the
// same clamps of k, no contraction, masks for their blends): the same bits.
// No include guard: each including file's anonymous namespace gets its own copy.

inline __m512 exp_poly16(__m512 x, __m512 kin) {
  const __m512i k = _mm512_cvttps_epi32(kin);
  const __m512 fk = _mm512_cvtepi32_ps(k);
  __m512 r = _mm512_sub_ps(x, _mm512_mul_ps(fk, _mm512_set1_ps(0.693359375f)));
  r = _mm512_sub_ps(r, _mm512_mul_ps(fk, _mm512_set1_ps(-2.12194440e-4f)));
  const __m512 r2 = _mm512_mul_ps(r, r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(5.0000001201e-1f));
  const __m512 e = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(p, r2), r), _mm512_set1_ps(1.0f));
  const __m512i k1 = _mm512_srai_epi32(_mm512_sub_epi32(k, _mm512_srai_epi32(k, 31)), 1);
  const __m512i k2 = _mm512_sub_epi32(k, k1);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 p1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k1, bias), 23));
  const __m512 p2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k2, bias), 23));
  return _mm512_mul_ps(_mm512_mul_ps(e, p1), p2);
}

inline __m512 exp_low_nan16(__m512 x, __m512 y) {
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-104.0f), _CMP_LT_OQ), y, _mm512_setzero_ps());
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, _mm512_add_ps(x, x));  // NaN
}

inline __m512 exp_f32_16(__m512 x) {
  const __m512 kf = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
  const __m512 half = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(kf, _mm512_setzero_ps(), _CMP_GE_OQ),
                                           _mm512_set1_ps(-0.5f), _mm512_set1_ps(0.5f));
  const __m512 kin = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(kf, half), _mm512_set1_ps(-200.0f)),
                                   _mm512_set1_ps(200.0f));
  const __m512 y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(88.8f), _CMP_GT_OQ),
                                        exp_poly16(x, kin), _mm512_set1_ps(__builtin_inff()));
  return exp_low_nan16(x, y);
}

inline __m512 exp_f32_16_nonpositive(__m512 x) {
  const __m512 kf = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
  const __m512 kin = _mm512_max_ps(_mm512_add_ps(kf, _mm512_set1_ps(-0.5f)), _mm512_set1_ps(-200.0f));
  return exp_low_nan16(x, exp_poly16(x, kin));
}
