// Row helpers of the CPU transformer ops (ops_layernorm.cpp, ops_softmax.cpp, ops_gelu.cpp,
// ops_embedding.cpp): loads and stores through FP32, the 32-lane row reductions of
// transformer_args.h (with AVX2: four 8-wide registers, the same operands in the same order), and
// the AVX2 forms of tmath's exp and GELU (vec_math.h on 8 lanes), operation for operation. Those
// files include no_fp_contract.h before anything else (the CUDA twin is compiled with
// --fmad=false), so these inline functions round every product and sum as the scalar
// specification does.
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
#include "core/aligned_vector.h"
#include "core/convert.h"

namespace amp::cpu::trows {

constexpr int64_t kBlock = 2048;              // elements per GELU work block
constexpr int64_t kParallelMin = 4 * kBlock;  // fork threads only for at least this many elements

#if defined(__AVX2__)
// The vector type of vec_math.h for AVX2: 8 lanes, masks as all-ones lanes.
struct V8 {
  using Vec = __m256;
  using IVec = __m256i;
  using Mask = __m256;
  static Vec set1(float x) { return _mm256_set1_ps(x); }
  static Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
  static Vec div(Vec a, Vec b) { return _mm256_div_ps(a, b); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  static Vec max(Vec a, Vec b) { return _mm256_max_ps(a, b); }
  static IVec cvtt(Vec a) { return _mm256_cvttps_epi32(a); }
  static Vec cvt(IVec a) { return _mm256_cvtepi32_ps(a); }
  static IVec iset1(int32_t x) { return _mm256_set1_epi32(x); }
  static IVec iadd(IVec a, IVec b) { return _mm256_add_epi32(a, b); }
  static IVec isub(IVec a, IVec b) { return _mm256_sub_epi32(a, b); }
  static IVec srai(IVec a, int n) { return _mm256_srai_epi32(a, n); }
  static IVec slli(IVec a, int n) { return _mm256_slli_epi32(a, n); }
  static Vec as_float(IVec a) { return _mm256_castsi256_ps(a); }
  static Mask ge(Vec a, Vec b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
  static Mask lt(Vec a, Vec b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static Mask eq(Vec a, Vec b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
  static Mask unord(Vec a, Vec b) { return _mm256_cmp_ps(a, b, _CMP_UNORD_Q); }
  static Vec blend(Mask m, Vec a, Vec b) { return _mm256_blendv_ps(a, b, m); }
  static Vec neg_abs(Vec a) { return _mm256_or_ps(a, _mm256_set1_ps(-0.0f)); }
  static constexpr bool kScalef = false;
};

#include "backend/cpu/vec_math.h"

// tmath::exp_f32 (arguments <= 0), gelu_tanh and gelu_tanh_grad on 8 lanes, with the scalar
// functions' bits (and so the CUDA twin's, at every thread count).
inline __m256 exp_f32_8_nonpositive(__m256 x) { return exp_nonpositive_v<V8>(x); }
inline __m256 gelu_tanh8(__m256 x) { return gelu_tanh_v<V8>(x); }
inline __m256 gelu_tanh_grad8(__m256 x) { return gelu_tanh_grad_v<V8>(x); }
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

inline aligned_vector<float> to_floats(const void* p, DType t, int64_t n) {
  aligned_vector<float> v(size_t(std::max<int64_t>(n, 1)));
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

// tmath::lane_tree on the 32 lanes of acc[0..3] (lanes 8r .. 8r + 7 in acc[r]), in registers: each
// step combines lane l with lane l + h, l < h (vop lane for lane, as op), for h = 16, 8, 4, 2, 1.
// The tree through memory (a store and 31 dependent scalar operations) was a quarter of a causal
// softmax row's time at the attention's lengths.
template <typename VOp>
inline float lane_tree8x4(const __m256 (&acc)[4], VOp vop) {
  __m256 v = vop(vop(acc[0], acc[2]), vop(acc[1], acc[3]));  // h = 16, then h = 8
  v = vop(v, _mm256_permute2f128_ps(v, v, 0x01));            // h = 4: lanes 4-7 onto 0-3
  v = vop(v, _mm256_permute_ps(v, 0x4E));                    // h = 2
  v = vop(v, _mm256_permute_ps(v, 0xB1));                    // h = 1
  return _mm256_cvtss_f32(v);
}

// The elements come from vals(j) (the 8 values at j) and val(j) (the one at j, for the tail).
template <typename Vals, typename Val, typename VOp, typename Op>
inline float lane_reduce_rows(int64_t n, float init, Vals&& vals, Val&& val, VOp vop, Op op) {
  __m256 acc[4];
  for (__m256& r : acc) r = _mm256_set1_ps(init);
  int64_t j0 = 0;
  for (; j0 + kRowLanes <= n; j0 += kRowLanes)
    for (int r = 0; r < 4; ++r) acc[r] = vop(acc[r], vals(j0 + 8 * r));
  if (j0 < n) {  // the partial last chunk: its lanes one at a time
    alignas(32) float p[kRowLanes];
    for (int r = 0; r < 4; ++r) _mm256_store_ps(p + 8 * r, acc[r]);
    for (int l = 0; j0 + l < n; ++l) p[l] = op(p[l], val(j0 + l));
    for (int r = 0; r < 4; ++r) acc[r] = _mm256_load_ps(p + 8 * r);
  }
  return lane_tree8x4(acc, vop);
}

template <typename VOp, typename Op>
inline float lane_reduce_rows(const float* v, int64_t n, float init, VOp vop, Op op) {
  return lane_reduce_rows(
      n, init, [&](int64_t j) { return _mm256_loadu_ps(v + j); }, [&](int64_t j) { return v[j]; }, vop, op);
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
