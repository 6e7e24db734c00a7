#include "backend/cpu/no_fp_contract.h"  // first: no FMA contraction in this file (explicit fmaf only)

#include "backend/cpu/attention_kernels.h"

#include <cmath>
#include <type_traits>

#include "backend/attention_args.h"
#include "backend/cpu/transformer_rows.h"
#include "backend/transformer_args.h"

namespace amp::cpu {


namespace {

// ---------------------------------------------------------------- the scalar specification
// backend/attention_args.h transcribed one element at a time.

// dot(x, y) over D terms: in order d = 0, 1, ..., or with pair order (BF16) d = 1, 0, 3, 2, ...
// (the last element alone when D is odd).
float dot(const float* x, const float* y, int64_t D, bool pair) {
  float a = 0.0f;
  int64_t d = 0;
  if (pair)
    for (; d + 2 <= D; d += 2) a = std::fma(x[d], y[d], std::fma(x[d + 1], y[d + 1], a));
  for (; d < D; ++d) a = std::fma(x[d], y[d], a);
  return a;
}

float score(const AttnHead& h, int64_t i, int64_t j) {
  float kj[1024];
  for (int64_t d = 0; d < h.D; ++d) kj[d] = h.kt[d * h.Tp + j];
  return h.scale * dot(h.q + i * h.Dp, kj, h.D, h.pair_dots) + 0.0f;
}

void forward_scalar(const AttnHead& h) {
  const int64_t T = h.T, D = h.D, Dp = h.Dp;
  for (int64_t i = 0; i < T; ++i) {
    float m = -INFINITY, l = 0.0f;
    float* acc = h.out + i * Dp;
    for (int64_t d = 0; d < Dp; ++d) acc[d] = 0.0f;
    for (int64_t j0 = 0; j0 <= i; j0 += kAttnKeyTile) {
      const int64_t j1 = std::min(j0 + kAttnKeyTile, i + 1);
      float s[kAttnKeyTile];
      float mt = m;
      for (int64_t j = j0; j < j1; ++j) {
        s[j - j0] = score(h, i, j);
        if (s[j - j0] > mt || std::isnan(s[j - j0])) mt = s[j - j0];
      }
      const float c = tmath::exp_f32(m - mt);
      float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      float p[kAttnKeyTile];
      for (int64_t j = j0; j < j1; ++j) {
        p[j - j0] = tmath::exp_f32(s[j - j0] - mt);
        lanes[(j - j0) % 8] += p[j - j0];
      }
      const float sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
      l = l * c + sum;
      for (int64_t d = 0; d < D; ++d) {
        float a = acc[d] * c;
        for (int64_t j = j0; j < j1; ++j) a = std::fma(p[j - j0], h.v[j * Dp + d], a);
        acc[d] = a;
      }
      m = mt;
    }
    for (int64_t d = 0; d < D; ++d) acc[d] = acc[d] / l;
    h.m_out[i] = m;
    h.l_out[i] = l;
  }
}

void backward_scalar(const AttnHead& h) {
  const int64_t T = h.T, D = h.D, Dp = h.Dp;
  for (int64_t i = 0; i < T; ++i) h.delta[i] = dot(h.dout + i * Dp, h.o + i * Dp, D, h.pair_dots);
  float vj[1024];
  // P_ij and dS_ij of one pair.
  const auto pair = [&](int64_t i, int64_t j, float* p, float* ds) {
    for (int64_t d = 0; d < D; ++d) vj[d] = h.vt[d * h.Tp + j];
    *p = tmath::exp_f32(score(h, i, j) - h.m[i]) / h.l[i];
    *ds = tmath::softmax_ds(h.scale, *p, dot(h.dout + i * Dp, vj, D, h.pair_dots), h.delta[i]);
  };
  for (int64_t i = 0; i < T * Dp; ++i) h.dq[i] = 0.0f, h.dk[i] = 0.0f, h.dv[i] = 0.0f;
  float p, ds;
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j <= i; ++j) {  // dq_i over j increasing
      pair(i, j, &p, &ds);
      for (int64_t d = 0; d < D; ++d) h.dq[i * Dp + d] = std::fma(ds, h.k[j * Dp + d], h.dq[i * Dp + d]);
    }
  for (int64_t j = 0; j < T; ++j)
    for (int64_t i = j; i < T; ++i) {  // dk_j, dv_j over i increasing
      pair(i, j, &p, &ds);
      for (int64_t d = 0; d < D; ++d) {
        h.dk[j * Dp + d] = std::fma(ds, h.q[i * Dp + d], h.dk[j * Dp + d]);
        h.dv[j * Dp + d] = std::fma(p, h.dout[i * Dp + d], h.dv[j * Dp + d]);
      }
    }
}

// ---------------------------------------------------------------- AVX2 + FMA tiles

#if defined(__AVX2__) && defined(__FMA__)
// vec_math.h's 8-lane type, with what the tiles add: loads, stores, FMA, exp of arguments <= 0.
struct AttnV8 : trows::V8 {
  static constexpr int W = 8;
  static Vec zero() { return _mm256_setzero_ps(); }
  static Vec load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  static Vec exp_nonpositive(Vec x) { return trows::exp_f32_8_nonpositive(x); }
  static constexpr bool kBf16Dots = false;
};

#include "backend/cpu/attention_tiles.h"

void forward_avx2(const AttnHead& h) { AttnTiles<AttnV8>::forward(h); }
void backward_avx2(const AttnHead& h) { AttnTiles<AttnV8>::backward(h); }
#endif

}  // namespace

const std::vector<AttnKernels>& available_attention_kernels() {
  static const std::vector<AttnKernels> ks = [] {
    std::vector<AttnKernels> v{{"scalar", forward_scalar, backward_scalar}};
#if defined(__AVX2__) && defined(__FMA__)
    // __builtin_cpu_supports also checks that the OS saves the AVX / AVX-512 register state.
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      v.push_back({"avx2", forward_avx2, backward_avx2});
      if (__builtin_cpu_supports("avx512f")) v.push_back({"avx512", attention_forward_avx512, attention_backward_avx512});
      if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16") && bf16_dot_pairs_match())
        v.push_back({"avx512bf16", attention_forward_avx512bf16, attention_backward_avx512bf16, true,
                     attention_forward_avx512bf16_products, attention_backward_avx512bf16_products});
    }
#endif
    return v;
  }();
  return ks;
}

const AttnKernels& active_attention_kernels() { return available_attention_kernels().back(); }

bool bf16_dots_allowed(const uint16_t* x, int64_t n) {
  // |x|'s bits a: exponent field 0 (zero or subnormal) or 255 (inf or NaN, a >= 0x7f80); |x| >=
  // 2^-55 is an exponent field >= 127 - 55, a >= 72 << 7. In 16-bit lanes throughout (the
  // compiler vectorizes it 16 or 32 values an instruction; with 32-bit lanes the check cost about
  // 5% of the attention op's time at T = 256).
  uint16_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t a = uint16_t(x[i] & 0x7fffu);
    bad |= uint16_t(uint16_t(a != 0) & uint16_t(uint16_t(a < uint16_t(72u << 7)) | uint16_t(a >= 0x7f80u)));
  }
  return bad == 0;
}

}  // namespace amp::cpu
