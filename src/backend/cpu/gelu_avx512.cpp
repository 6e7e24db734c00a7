// The GELU kernels of gelu_kernels.h with AVX-512F: transformer_rows.h's gelu_tanh8 and
// gelu_tanh_grad8 on 16 lanes, operation for operation (masks for their blends), the last partial
// vector through masked loads and stores. Called only where the CPU has AVX-512F
// (ops_gelu.cpp checks).
#include "backend/cpu/no_fp_contract.h"  // first: no FMA contraction in this file

#include "backend/cpu/gelu_kernels.h"

#if defined(__AVX2__)

// GCC 12's AVX-512 headers and -Wmaybe-uninitialized: see attention_avx512.cpp.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "backend/transformer_args.h"

// Only what follows is AVX-512 code, in an anonymous namespace (see attention_avx512.cpp).
#pragma GCC push_options
#pragma GCC target("avx512f")

namespace amp::cpu {

namespace {

#include "backend/cpu/exp_avx512.h"

inline __m512 gelu_u16(__m512 x) {
  const __m512 cube = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
  return _mm512_mul_ps(_mm512_set1_ps(tmath::kSqrt2OverPi),
                       _mm512_add_ps(x, _mm512_mul_ps(_mm512_set1_ps(tmath::kGeluCubic), cube)));
}

// t = exp(-2|u|) as gelu_t8 computes it, and the lanes where u >= 0.
inline __m512 gelu_t16(__m512 u, __mmask16* u_ge0) {
  *u_ge0 = _mm512_cmp_ps_mask(u, _mm512_setzero_ps(), _CMP_GE_OQ);
  const __m512 neg_abs = _mm512_castsi512_ps(
      _mm512_or_si512(_mm512_castps_si512(u), _mm512_set1_epi32(int32_t(0x80000000u))));
  return exp_f32_16_nonpositive(_mm512_mul_ps(neg_abs, _mm512_set1_ps(2.0f)));
}

inline __m512 gelu16(__m512 x) {
  __mmask16 ge0;
  const __m512 t = gelu_t16(gelu_u16(x), &ge0);
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_mul_ps(x, _mm512_div_ps(_mm512_mask_blend_ps(ge0, t, one), _mm512_add_ps(one, t)));
}

inline __m512 gelu_grad16(__m512 x) {
  __mmask16 ge0;
  const __m512 t = gelu_t16(gelu_u16(x), &ge0);
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 inv = _mm512_div_ps(one, _mm512_add_ps(one, t));
  const __m512 tinv = _mm512_mul_ps(t, inv);
  const __m512 s = _mm512_mask_blend_ps(ge0, tinv, inv);
  const __m512 oms = _mm512_mask_blend_ps(ge0, inv, tinv);
  const __m512 ss = _mm512_mul_ps(s, oms);
  const __m512 du = _mm512_mul_ps(_mm512_set1_ps(tmath::kSqrt2OverPi),
                                  _mm512_add_ps(one, _mm512_mul_ps(_mm512_set1_ps(3.0f * tmath::kGeluCubic),
                                                                   _mm512_mul_ps(x, x))));
  const __m512 g = _mm512_add_ps(s, _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(2.0f), x), ss), du));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(ss, _mm512_setzero_ps(), _CMP_EQ_OQ), g, s);
}

__mmask16 tail_mask(int64_t left) { return __mmask16((1u << left) - 1u); }

}  // namespace

void gelu_forward_avx512(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, gelu16(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

void gelu_backward_avx512(const float* x, const float* dy, float* dx, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dx + i, _mm512_mul_ps(_mm512_loadu_ps(dy + i), gelu_grad16(_mm512_loadu_ps(x + i))));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 g = gelu_grad16(_mm512_maskz_loadu_ps(m, x + i));
    _mm512_mask_storeu_ps(dx + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dy + i), g));
  }
}

}  // namespace amp::cpu

#pragma GCC pop_options

#else

namespace amp::cpu {
void gelu_forward_avx512(const float*, float*, int64_t) {}
void gelu_backward_avx512(const float*, const float*, float*, int64_t) {}
}  // namespace amp::cpu

#endif
