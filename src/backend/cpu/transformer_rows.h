// Row helpers of the CPU transformer ops (ops_layernorm.cpp, ops_softmax.cpp, ops_gelu.cpp,
// ops_embedding.cpp): loads and stores through FP32, the 32-lane row reductions of
// transformer_args.h (with AVX2: four 8-wide registers, the same operands in the same order), and
// the AVX2 forms of tmath's exp and GELU, operation for operation. Those files include
// no_fp_contract.h before anything else (the CUDA twin is compiled with --fmad=false), so these inline
// functions round every product and sum as the scalar specification does.
#pragma once

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backend/cpu/float_rows.h"
#include "backend/transformer_args.h"
#include "core/convert.h"

namespace amp::cpu::trows {

constexpr int64_t kBlock = 2048;              // elements per GELU work block
constexpr int64_t kParallelMin = 4 * kBlock;  // fork threads only for at least this many elements

#if defined(__AVX2__)
// The scalar functions of transformer_args.h (tmath::exp_f32, gelu_tanh, gelu_tanh_grad) on 8
// lanes, operation for operation (no contraction, the same constants, branches as blends), so the
// vector path gives the scalar path's bits: the CUDA twin and every thread count agree with it.
// exp_f32's reduction, polynomial and scaling by 2^k for lanes whose rounded x / ln 2 (kin, before
// truncation) lies in [-200, 200]; the callers replace the lanes exp_f32 treats apart.
inline __m256 exp_poly8(__m256 x, __m256 kin) {
  const __m256i k = _mm256_cvttps_epi32(kin);
  const __m256 fk = _mm256_cvtepi32_ps(k);
  __m256 r = _mm256_sub_ps(x, _mm256_mul_ps(fk, _mm256_set1_ps(0.693359375f)));
  r = _mm256_sub_ps(r, _mm256_mul_ps(fk, _mm256_set1_ps(-2.12194440e-4f)));
  const __m256 r2 = _mm256_mul_ps(r, r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(5.0000001201e-1f));
  const __m256 e = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, r2), r), _mm256_set1_ps(1.0f));
  // k1 = k / 2 truncated toward zero, k2 = k - k1; 2^k1 and 2^k2 from their exponent bits.
  const __m256i k1 = _mm256_srai_epi32(_mm256_sub_epi32(k, _mm256_srai_epi32(k, 31)), 1);
  const __m256i k2 = _mm256_sub_epi32(k, k1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
  const __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(e, p1), p2);
}

// Lanes below -104 give 0, NaN lanes x + x.
inline __m256 exp_low_nan8(__m256 x, __m256 y) {
  y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(-104.0f), _CMP_LT_OQ));
  return _mm256_blendv_ps(y, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

inline __m256 exp_f32_8(__m256 x) {
  const __m256 kf = _mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f));
  const __m256 half = _mm256_blendv_ps(_mm256_set1_ps(-0.5f), _mm256_set1_ps(0.5f),
                                       _mm256_cmp_ps(kf, _mm256_setzero_ps(), _CMP_GE_OQ));
  // Lanes outside [-104, 88.8] or NaN are replaced below; keep their k in range meanwhile.
  const __m256 kin = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(kf, half), _mm256_set1_ps(-200.0f)), _mm256_set1_ps(200.0f));
  const __m256 y = _mm256_blendv_ps(exp_poly8(x, kin), _mm256_set1_ps(std::numeric_limits<float>::infinity()),
                                    _mm256_cmp_ps(x, _mm256_set1_ps(88.8f), _CMP_GT_OQ));
  return exp_low_nan8(x, y);
}

// exp_f32_8 where every lane is <= 0 or NaN (GELU's exp(-2|u|), the softmax's exp(v - max)): no
// lane overflows, and rounding kf - 0.5 toward zero gives exp_f32's k also at kf = +-0 (both 0).
// The same bits, fewer operations.
inline __m256 exp_f32_8_nonpositive(__m256 x) {
  const __m256 kf = _mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f));
  const __m256 kin = _mm256_max_ps(_mm256_add_ps(kf, _mm256_set1_ps(-0.5f)), _mm256_set1_ps(-200.0f));
  return exp_low_nan8(x, exp_poly8(x, kin));
}

inline __m256 gelu_u8(__m256 x) {
  const __m256 cube = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  return _mm256_mul_ps(_mm256_set1_ps(tmath::kSqrt2OverPi),
                       _mm256_add_ps(x, _mm256_mul_ps(_mm256_set1_ps(tmath::kGeluCubic), cube)));
}

// t = exp(-2|u|), and the sign test of u. -2|u| is computed as (-|u|) * 2 (the sign bit set, one
// exact product): the specification's -2 * |u| bit for bit, except the sign of a NaN and of a zero
// (exp gives 1 for either zero).
inline __m256 gelu_t8(__m256 u, __m256* u_ge0) {
  *u_ge0 = _mm256_cmp_ps(u, _mm256_setzero_ps(), _CMP_GE_OQ);
  const __m256 neg_abs = _mm256_or_ps(u, _mm256_set1_ps(-0.0f));
  return exp_f32_8_nonpositive(_mm256_mul_ps(neg_abs, _mm256_set1_ps(2.0f)));
}

// s = (u >= 0 ? 1 : t) / (1 + t): one division for the specification's two branches.
inline __m256 gelu_tanh8(__m256 x) {
  __m256 ge0;
  const __m256 t = gelu_t8(gelu_u8(x), &ge0);
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_mul_ps(x, _mm256_div_ps(_mm256_blendv_ps(t, one, ge0), _mm256_add_ps(one, t)));
}

inline __m256 gelu_tanh_grad8(__m256 x) {
  __m256 ge0;
  const __m256 t = gelu_t8(gelu_u8(x), &ge0);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 inv = _mm256_div_ps(one, _mm256_add_ps(one, t));
  const __m256 tinv = _mm256_mul_ps(t, inv);
  const __m256 s = _mm256_blendv_ps(tinv, inv, ge0);
  const __m256 oms = _mm256_blendv_ps(inv, tinv, ge0);
  const __m256 ss = _mm256_mul_ps(s, oms);
  const __m256 du = _mm256_mul_ps(_mm256_set1_ps(tmath::kSqrt2OverPi),
                                  _mm256_add_ps(one, _mm256_mul_ps(_mm256_set1_ps(3.0f * tmath::kGeluCubic),
                                                                   _mm256_mul_ps(x, x))));
  const __m256 g = _mm256_add_ps(s, _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(2.0f), x), ss), du));
  return _mm256_blendv_ps(g, s, _mm256_cmp_ps(ss, _mm256_setzero_ps(), _CMP_EQ_OQ));
}
#endif

constexpr int64_t kTile = 256;                // columns per column-tile work item
constexpr float kQuietNaN = std::numeric_limits<float>::quiet_NaN();

inline void load(const void* p, DType t, int64_t off, int64_t n, float* dst) {
  convert(at(p, t, off), t, dst, DType::F32, size_t(n));
}
inline void store(const float* src, void* p, DType t, int64_t off, int64_t n) {
  convert(src, DType::F32, at(p, t, off), t, size_t(n));
}

inline float add_op(float a, float b) { return a + b; }
// std::fmax(a, b) as glibc computes it (maxss: b on ties; a NaN operand is ignored), inlined: the
// library call was 1-2% of a GPT step.
inline float max_op(float a, float b) { return b != b ? a : (a > b ? a : b); }

// The row reductions of transformer_args.h: lane l combines f(l), f(l + 32), ... from `init`, then
// the butterfly tree.
template <typename F, typename Op>
inline float lane_reduce(int64_t n, float init, F&& f, Op op) {
  float p[kRowLanes];
  for (float& v : p) v = init;
  int64_t j0 = 0;
  for (; j0 + kRowLanes <= n; j0 += kRowLanes)
    for (int l = 0; l < kRowLanes; ++l) p[l] = op(p[l], f(j0 + l));
  for (int l = 0; j0 + l < n; ++l) p[l] = op(p[l], f(j0 + l));
  return tmath::lane_tree(p, op);
}

template <typename F>
inline float lane_sum(int64_t n, F&& f) {
  return lane_reduce(n, 0.0f, f, add_op);
}

inline std::vector<float> to_floats(const void* p, DType t, int64_t n) {
  std::vector<float> v(size_t(std::max<int64_t>(n, 1)));
  if (n > 0) load(p, t, 0, n, v.data());
  return v;
}

// The row reductions over a float array. With AVX2 the 32 lanes are four 8-wide registers, so every
// lane combines the same operands in the same order as lane_reduce: the same bits.
#if defined(__AVX2__)
// fmax(acc, x) on 8 lanes: glibc's fmaxf returns its second operand on ties (maxss) and ignores a
// NaN; _mm256_max_ps(acc, x) returns x on ties and on a NaN, so a NaN x keeps acc.
inline __m256 fmax8(__m256 acc, __m256 x) {
  return _mm256_blendv_ps(_mm256_max_ps(acc, x), acc, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}
inline __m256 add8(__m256 acc, __m256 x) { return _mm256_add_ps(acc, x); }

template <typename VOp, typename Op>
inline float lane_reduce_rows(const float* v, int64_t n, float init, VOp vop, Op op) {
  __m256 acc[4];
  for (__m256& r : acc) r = _mm256_set1_ps(init);
  int64_t j0 = 0;
  for (; j0 + kRowLanes <= n; j0 += kRowLanes)
    for (int r = 0; r < 4; ++r) acc[r] = vop(acc[r], _mm256_loadu_ps(v + j0 + 8 * r));
  alignas(32) float p[kRowLanes];
  for (int r = 0; r < 4; ++r) _mm256_store_ps(p + 8 * r, acc[r]);
  for (int l = 0; j0 + l < n; ++l) p[l] = op(p[l], v[j0 + l]);
  return tmath::lane_tree(p, op);
}
#endif

inline float row_max(const float* v, int64_t n) {
#if defined(__AVX2__)
  return lane_reduce_rows(v, n, -std::numeric_limits<float>::infinity(), fmax8, max_op);
#else
  return lane_reduce(n, -std::numeric_limits<float>::infinity(), [&](int64_t j) { return v[j]; }, max_op);
#endif
}

inline float lanes_sum(const float* v, int64_t n) {
#if defined(__AVX2__)
  return lane_reduce_rows(v, n, 0.0f, add8, add_op);
#else
  return lane_sum(n, [&](int64_t j) { return v[j]; });
#endif
}

}  // namespace amp::cpu::trows
