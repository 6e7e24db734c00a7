// The fused attention's tile kernels (attention_tiles.h) with AVX-512F: 16 lanes, 64 keys per
// register block. Called only where the CPU has AVX-512F (attention_kernels.cpp checks).
#include "backend/cpu/no_fp_contract.h"  // first: no FMA contraction in this file (explicit FMAs only)

#include "backend/cpu/attention_kernels.h"

#if defined(__AVX2__) && defined(__FMA__)

// GCC 12's AVX-512 headers build "undefined" vectors as `__m512i __Y = __Y;`, which
// -Wmaybe-uninitialized reports at every inlined use (GCC bug 105593, fixed in 12.3); the
// pragma covers the header's own lines, included here first (its guard keeps it from coming back).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "backend/attention_args.h"
#include "backend/cpu/transformer_rows.h"
#include "backend/transformer_args.h"

// Everything included above keeps the file's own target; only what follows is AVX-512 code, in an
// anonymous namespace so that nothing compiled here can stand in for another file's function.
#pragma GCC push_options
#pragma GCC target("avx512f")

namespace amp::cpu {

using trows::exp_f32_8;

namespace {

struct V16 {
  using Vec = __m512;
  static constexpr int W = 16;
  static Vec zero() { return _mm512_setzero_ps(); }
  static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  static Vec set1(float x) { return _mm512_set1_ps(x); }
  static Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
  static Vec div(Vec a, Vec b) { return _mm512_div_ps(a, b); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  // tmath::exp_f32 on 16 lanes: trows::exp_f32_8 operation for operation (the same constants, the
  // same clamps of k, no contraction, masks for its blends), so the same bits.
  static Vec exp(Vec x) {
    const __m512 zero = _mm512_setzero_ps();
    const __m512 kf = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
    const __m512 half = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(kf, zero, _CMP_GE_OQ), _mm512_set1_ps(-0.5f),
                                             _mm512_set1_ps(0.5f));
    const __m512 kin = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(kf, half), _mm512_set1_ps(-200.0f)),
                                     _mm512_set1_ps(200.0f));
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
    __m512 y = _mm512_mul_ps(_mm512_mul_ps(e, p1), p2);
    y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-104.0f), _CMP_LT_OQ), y, zero);
    y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(88.8f), _CMP_GT_OQ), y,
                             _mm512_set1_ps(__builtin_inff()));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, _mm512_add_ps(x, x));  // NaN
  }
};

#include "backend/cpu/attention_tiles.h"

}  // namespace

void attention_forward_avx512(const AttnHead& h) { AttnTiles<V16>::forward(h); }
void attention_backward_avx512(const AttnHead& h) { AttnTiles<V16>::backward(h); }

}  // namespace amp::cpu

#pragma GCC pop_options

#else

namespace amp::cpu {
void attention_forward_avx512(const AttnHead&) {}
void attention_backward_avx512(const AttnHead&) {}
}  // namespace amp::cpu

#endif
