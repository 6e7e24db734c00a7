// The AVX-512F set of row_kernels.h: row_kernels.cpp's AVX2 forms on 16 lanes, operation for
// operation (masks for their blends), the 32 lanes of a row reduction as two registers, the last
// partial vector through masked loads and stores instead of scalar tails. Called only where the
// CPU has AVX-512F (row_kernels.cpp checks).
#include "backend/cpu/no_fp_contract.h"  // first: no FMA contraction in this file

#include "backend/cpu/row_kernels.h"

#if defined(__AVX2__)

// GCC 12's AVX-512 headers and -Wmaybe-uninitialized: see attention_avx512.cpp. The BF16 widen and
// round (core/bf16_avx512.h) inlined here draw the same report as -Wuninitialized in the
// sanitizer build (-O1).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cstring>

#include "backend/cpu/transformer_rows.h"
#include "backend/transformer_args.h"
#include "core/bf16_avx512.h"
#include "core/prefetch.h"

// Only what follows is AVX-512 code, in an anonymous namespace (see attention_avx512.cpp).
#pragma GCC push_options
#pragma GCC target("avx512f")

namespace amp::cpu {

namespace {

#include "backend/cpu/exp_avx512.h"

inline __m512 gelu16(__m512 x) { return gelu_tanh_v<V16>(x); }
inline __m512 gelu_grad16(__m512 x) { return gelu_tanh_grad_v<V16>(x); }

__mmask16 tail_mask(int64_t left) { return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1u); }

void gelu_forward(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prefetch_ahead(x + i);
    _mm512_storeu_ps(y + i, gelu16(_mm512_loadu_ps(x + i)));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prefetch_ahead(x + i);
    prefetch_ahead(dy + i);
    _mm512_storeu_ps(dx + i, _mm512_mul_ps(_mm512_loadu_ps(dy + i), gelu_grad16(_mm512_loadu_ps(x + i))));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 g = gelu_grad16(_mm512_maskz_loadu_ps(m, x + i));
    _mm512_mask_storeu_ps(dx + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dy + i), g));
  }
}

// 16 BF16 values from p as floats, and 16 floats rounded to BF16 at p (core/bf16_avx512.h). The
// widening shifts the bits only: bf16_widen_avx512 also quiets signalling NaNs, but every value
// widened here enters an arithmetic operation first, which quiets a signalling NaN keeping its
// payload, as that would have.
__m512 load_bf16(const uint16_t* p) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
void store_bf16(uint16_t* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bf16_bits_avx512(_mm512_castps_si512(v)));
}

// tmath::lane_tree on lanes 0-15 in lo, 16-31 in hi.
template <typename Op>
float lane_tree32(__m512 lo, __m512 hi, Op&& op) {
  __m512 v = op(lo, __mmask16(0xffff), hi);                              // h = 16
  v = op(v, __mmask16(0x00ff), _mm512_shuffle_f32x4(v, v, 0x4E));          // h = 8: 256-bit halves swapped
  v = op(v, __mmask16(0x000f), _mm512_shuffle_f32x4(v, v, 0xB1));          // h = 4: 128-bit blocks swapped
  v = op(v, __mmask16(0x0003), _mm512_permute_ps(v, 0x4E));                // h = 2
  v = op(v, __mmask16(0x0001), _mm512_permute_ps(v, 0xB1));                // h = 1
  return _mm512_cvtss_f32(v);
}

// A 32-lane row reduction (transformer_args.h): lanes 0-15 in lo, 16-31 in hi; f(j, mask) gives
// the 16 values at element j (masked lanes may hold anything), op(acc, mask, x) combines the lanes
// of the mask. Full chunks of 32, then the partial one, then the butterfly tree (tmath::lane_tree)
// in registers: lane l with lane l + h, l < h, for h = 16, 8, 4, 2, 1 (the tree through memory was
// a quarter of a causal softmax row's time at the attention's lengths).
template <typename F, typename Op>
float reduce32(int64_t n, float init, F&& f, Op&& op) {
  __m512 lo = _mm512_set1_ps(init), hi = lo;
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    lo = op(lo, __mmask16(0xffff), f(j, __mmask16(0xffff)));
    hi = op(hi, __mmask16(0xffff), f(j + 16, __mmask16(0xffff)));
  }
  if (j < n) {
    const __mmask16 mlo = tail_mask(n - j);
    lo = op(lo, mlo, f(j, mlo));
    if (n - j > 16) {
      const __mmask16 mhi = tail_mask(n - j - 16);
      hi = op(hi, mhi, f(j + 16, mhi));
    }
  }
  return lane_tree32(lo, hi, op);
}

// fmax(acc, x) in the mask's lanes as trows::fmax8: a NaN x keeps acc; max_ps(acc, x) gives x on ties.
__m512 fmax16(__m512 acc, __mmask16 m, __m512 x) {
  return _mm512_mask_max_ps(acc, m & _mm512_cmp_ps_mask(x, x, _CMP_ORD_Q), acc, x);
}
__m512 add16(__m512 acc, __mmask16 m, __m512 x) { return _mm512_mask_add_ps(acc, m, acc, x); }

// Two sums of the 32 lanes in one pass: f(j, mask, &a, &b) gives the 16 values of each at
// element j; the same order as reduce32 with add16 on each.
template <typename F>
void sums32x2(int64_t n, F&& f, float* sa, float* sb) {
  __m512 a[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()}, b[2] = {a[0], a[0]};
  auto add_at = [&](int h, int64_t j, __mmask16 m) {
    __m512 va, vb;
    f(j, m, &va, &vb);
    a[h] = add16(a[h], m, va);
    b[h] = add16(b[h], m, vb);
  };
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) add_at(0, j, __mmask16(0xffff)), add_at(1, j + 16, __mmask16(0xffff));
  if (j < n) {
    add_at(0, j, tail_mask(n - j));
    if (n - j > 16) add_at(1, j + 16, tail_mask(n - j - 16));
  }
  *sa = lane_tree32(a[0], a[1], add16);
  *sb = lane_tree32(b[0], b[1], add16);
}

// Every element of the row, 16 at a time: f(j, mask) -> the values to store at j.
template <typename F>
void each16(float* out, int64_t n, F&& f) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(out + j, f(j, __mmask16(0xffff)));
  if (j < n) {
    const __mmask16 m = tail_mask(n - j);
    _mm512_mask_storeu_ps(out + j, m, f(j, m));
  }
}

// A softmax row's passes before its division: the maximum m of scale * s, then v = exp(scale * s -
// m) (the same product recomputed, so v may be s), then the sum of v. Writes {m, sum} to stats.
void softmax_exps(const float* s, float scale, float* v, int64_t n, float* stats) {
  const __m512 vscale = _mm512_set1_ps(scale);
  auto scaled = [&](int64_t j, __mmask16 m) { return _mm512_mul_ps(vscale, _mm512_maskz_loadu_ps(m, s + j)); };
  const float mx = reduce32(n, -__builtin_inff(), scaled, fmax16);
  const __m512 vm = _mm512_set1_ps(mx);
  // scale * s - m <= 0 (m is the maximum) or NaN in the row's lanes (masked-off lanes are not stored)
  each16(v, n, [&](int64_t j, __mmask16 m) { return exp_f32_16_nonpositive(_mm512_sub_ps(scaled(j, m), vm)); });
  stats[0] = mx;
  stats[1] = reduce32(n, 0.0f, [&](int64_t j, __mmask16 m) { return _mm512_maskz_loadu_ps(m, v + j); }, add16);
}

// softmax_exps, then v / sum.
void softmax_forward(const float* s, float scale, float* v, int64_t n, float* stats) {
  float st[2];
  softmax_exps(s, scale, v, n, st);
  if (stats) stats[0] = st[0], stats[1] = st[1];
  const __m512 vs = _mm512_set1_ps(st[1]);
  each16(v, n, [&](int64_t j, __mmask16 m) { return _mm512_div_ps(_mm512_maskz_loadu_ps(m, v + j), vs); });
}

void softmax_backward(const float* p, const float* dp, float scale, float* ds, int64_t n) {
  const __m512 vdot = _mm512_set1_ps(reduce32(
      n, 0.0f,
      [&](int64_t j, __mmask16 m) { return _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dp + j), _mm512_maskz_loadu_ps(m, p + j)); },
      add16));
  const __m512 vscale = _mm512_set1_ps(scale);
  each16(ds, n, [&](int64_t j, __mmask16 m) {  // tmath::softmax_ds: scale * p * (dp - dot)
    return _mm512_mul_ps(_mm512_mul_ps(vscale, _mm512_maskz_loadu_ps(m, p + j)),
                         _mm512_sub_ps(_mm512_maskz_loadu_ps(m, dp + j), vdot));
  });
}

// Every element of a BF16 row, 16 at a time: f(j, mask) -> the 16 floats rounded and stored at j
// (the last partial vector through a padded copy: masked 16-bit stores would need AVX-512BW).
template <typename F>
void each16_to_bf16(uint16_t* out, int64_t n, F&& f) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) store_bf16(out + j, f(j, __mmask16(0xffff)));
  if (j < n) {
    alignas(32) uint16_t res[16];
    store_bf16(res, f(j, tail_mask(n - j)));
    std::memcpy(out + j, res, size_t(n - j) * 2);
  }
}

// The BF16 matmul attention's rows: softmax_forward's passes with the division's pass rounding
// into p16 (s keeps exp(scale * s - m)); from saved statistics, the exp and the division in one
// pass; softmax_backward on the widened p16, rounding into ds16.
void softmax_forward_bf16(float* s, float scale, uint16_t* p16, int64_t n, float* stats) {
  float st[2];
  softmax_exps(s, scale, s, n, st);
  if (stats) stats[0] = st[0], stats[1] = st[1];
  const __m512 vs = _mm512_set1_ps(st[1]);
  each16_to_bf16(p16, n, [&](int64_t j, __mmask16 m) { return _mm512_div_ps(_mm512_maskz_loadu_ps(m, s + j), vs); });
}

void softmax_probs_bf16(const float* s, float scale, float m, float sum, uint16_t* p16, int64_t n) {
  const __m512 vscale = _mm512_set1_ps(scale), vm = _mm512_set1_ps(m), vs = _mm512_set1_ps(sum);
  each16_to_bf16(p16, n, [&](int64_t j, __mmask16 k) {
    const __m512 e = exp_f32_16_nonpositive(_mm512_sub_ps(_mm512_mul_ps(vscale, _mm512_maskz_loadu_ps(k, s + j)), vm));
    return _mm512_div_ps(e, vs);
  });
}

// A BF16 row of n elements read 16 at a time as floats, at j = 0, 16, ...: the last partial vector
// from a zero-padded copy taken at construction (masked 16-bit loads need AVX-512BW), so the row
// may be overwritten chunk by chunk once each chunk is read.
class Bf16Row {
 public:
  Bf16Row(const uint16_t* p, int64_t n) : p_(p), full_(n / 16 * 16) {
    if (full_ < n) std::memcpy(pad_, p + full_, size_t(n - full_) * 2);
  }
  __m512 operator()(int64_t j) const { return load_bf16(j < full_ ? p_ + j : pad_); }

 private:
  const uint16_t* p_;
  int64_t full_;
  alignas(32) uint16_t pad_[16] = {};
};

void softmax_backward_bf16(const uint16_t* p16, const float* dp, float scale, uint16_t* ds16, int64_t n) {
  const Bf16Row p(p16, n);
  const __m512 vdot = _mm512_set1_ps(reduce32(
      n, 0.0f, [&](int64_t j, __mmask16 m) { return _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dp + j), p(j)); }, add16));
  const __m512 vscale = _mm512_set1_ps(scale);
  each16_to_bf16(ds16, n, [&](int64_t j, __mmask16 m) {  // tmath::softmax_ds: scale * p * (dp - dot)
    return _mm512_mul_ps(_mm512_mul_ps(vscale, p(j)), _mm512_sub_ps(_mm512_maskz_loadu_ps(m, dp + j), vdot));
  });
}

// layernorm_forward's row (ops_layernorm.cpp, transformer_args.h) on the widened BF16 row: mean =
// lanes_sum(x) / n, var = lanes_sum((x - mean)^2) / n, rstd = ln_rstd(var, eps), y =
// ln_out(ln_norm(x, mean, rstd), gamma, beta) rounded. Three passes over the row in L1.
void layernorm_forward_bf16(const uint16_t* x16, const float* gamma, const float* beta, float eps, uint16_t* y,
                            int64_t n, float* stats) {
  const Bf16Row x(x16, n);
  const float mean = reduce32(n, 0.0f, [&](int64_t j, __mmask16) { return x(j); }, add16) / float(n);
  const __m512 vmean = _mm512_set1_ps(mean);
  const float var = reduce32(n, 0.0f, [&](int64_t j, __mmask16) {
                      const __m512 d = _mm512_sub_ps(x(j), vmean);
                      return _mm512_mul_ps(d, d);
                    }, add16) / float(n);
  const float rstd = tmath::ln_rstd(var, eps);
  const __m512 vrstd = _mm512_set1_ps(rstd);
  each16_to_bf16(y, n, [&](int64_t j, __mmask16 m) {  // ln_out(ln_norm(x)): (x - mean) * rstd * gamma + beta
    const __m512 nrm = _mm512_mul_ps(_mm512_sub_ps(x(j), vmean), vrstd);
    return _mm512_add_ps(_mm512_mul_ps(nrm, _mm512_maskz_loadu_ps(m, gamma + j)), _mm512_maskz_loadu_ps(m, beta + j));
  });
  stats[0] = mean;
  stats[1] = rstd;
}

// layernorm_backward's row: n = ln_norm(x), dn = gamma * dy, a = lanes_sum(dn) / C, b = lanes_sum(dn
// * n) / C (one pass), dx = [dx_old +] ln_dx(dn, a, n, b, rstd) rounded with the dgamma/dbeta
// terms (a second pass): n and dn are recomputed from the row in L1 instead of stored.
void layernorm_backward_bf16(const uint16_t* x16, const uint16_t* dy16, const float* gamma, float mean, float rstd,
                             uint16_t* dx, bool accumulate_dx, float* ag, float* ab, int64_t n) {
  const Bf16Row x(x16, n), dy(dy16, n);
  const __m512 vmean = _mm512_set1_ps(mean), vrstd = _mm512_set1_ps(rstd);
  auto norm = [&](int64_t j) { return _mm512_mul_ps(_mm512_sub_ps(x(j), vmean), vrstd); };
  auto dnorm = [&](int64_t j, __mmask16 m) { return _mm512_mul_ps(_mm512_maskz_loadu_ps(m, gamma + j), dy(j)); };
  float suma, sumb;
  sums32x2(n, [&](int64_t j, __mmask16 m, __m512* dn, __m512* dnn) {
    *dn = dnorm(j, m);
    *dnn = _mm512_mul_ps(*dn, norm(j));
  }, &suma, &sumb);
  const __m512 va = _mm512_set1_ps(suma / float(n)), vb = _mm512_set1_ps(sumb / float(n));
  const Bf16Row old(accumulate_dx ? dx : dy16, accumulate_dx ? n : 0);  // read before dx's chunk is written
  each16_to_bf16(dx, n, [&](int64_t j, __mmask16 m) {
    const __m512 nj = norm(j), dyj = dy(j), dn = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, gamma + j), dyj);
    const __m512 d = _mm512_mul_ps(_mm512_sub_ps(_mm512_sub_ps(dn, va), _mm512_mul_ps(nj, vb)), vrstd);
    if (ag) {
      _mm512_mask_storeu_ps(ag + j, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, ag + j), _mm512_mul_ps(nj, dyj)));
      _mm512_mask_storeu_ps(ab + j, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, ab + j), dyj));
    }
    return accumulate_dx ? _mm512_add_ps(old(j), d) : d;
  });
}

// dx[i] = round(widen(dy[i]) * grad[x[i]]) (ops_gelu.cpp's backward_16 product and rounding), in
// chunks: gelu'(x) looked up into a buffer by a scalar loop (AVX-512 gathers ran slower than it on
// Zen 5), then dy widened, multiplied and rounded in registers (no conversion passes).
void gelu_backward_bf16_table(const float* grad, const uint16_t* x, const uint16_t* dy, uint16_t* dx, int64_t n) {
  constexpr int64_t kChunk = 512;
  alignas(64) float g[kChunk];
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t len = std::min(kChunk, n - c);
    for (int64_t i = 0; i < len; ++i) g[i] = grad[x[c + i]];  // the chunk's x read whole: dx may be x
    const Bf16Row d(dy + c, len);
    each16_to_bf16(dx + c, len, [&](int64_t j, __mmask16 m) { return _mm512_mul_ps(d(j), _mm512_maskz_loadu_ps(m, g + j)); });
  }
}

void exp_nonpositive(const float* x, float* y, int64_t n) {
  each16(y, n, [&](int64_t j, __mmask16 m) { return exp_f32_16_nonpositive(_mm512_maskz_loadu_ps(m, x + j)); });
}

}  // namespace

const RowKernels& row_kernels_avx512() {
  static const RowKernels k{"avx512", gelu_forward, gelu_backward, softmax_forward, softmax_backward, exp_nonpositive,
                            softmax_forward_bf16, softmax_probs_bf16, softmax_backward_bf16,
                            layernorm_forward_bf16, layernorm_backward_bf16, gelu_backward_bf16_table};
  return k;
}

}  // namespace amp::cpu

#pragma GCC pop_options

#else

namespace amp::cpu {
const RowKernels& row_kernels_avx512() { return available_row_kernels().front(); }  // never called
}  // namespace amp::cpu

#endif
