// Arguments and numeric semantics of the transformer ops a GPT-2 style (decoder-only, pre-LN)
// model needs besides the GEMMs of backend/ops_args.h: layer norm, causal softmax, GELU (tanh
// approximation) and the token + position embedding, forward and backward. Plain structs, no
// virtuals; the CPU twins are in amp::cpu::CpuOps (src/backend/cpu/ops_layernorm.cpp,
// ops_softmax.cpp, ops_gelu.cpp, ops_embedding.cpp), the CUDA twins in amp::cuda::CudaOps
// (cuda/ops_layernorm.cu, ops_softmax.cu, ops_gelu.cu, ops_embedding.cu). Both validate with the
// check_args() functions below, so an argument one side refuses the other refuses too.
//
// Shared rules (the autocast policy of docs/design.md):
// - Activations and parameters have ONE dtype per call (`type`: F32, F16 or BF16; the parameters
//   are the 16-bit working copy), statistics are FP32, tokens int32. The softmax takes its input
//   and output dtypes separately (scores may come from a GEMM into FP32).
// - All math in FP32 (16-bit values are widened exactly), one rounding to the output's dtype.
// - Every per-element formula is one of the AMP_HD functions of namespace amp::tmath below, called
//   by both twins, and every reduction has a FIXED order written down here (no atomics on floats),
//   so the twins are bit-identical (NaN payloads aside) and every run gives the same bits whatever
//   the thread count. That needs IEEE FP32 without contraction of a*b+c into an FMA: the CUDA
//   sources are compiled with --fmad=false, the CPU twin disables contraction for its file. The
//   FMAs a formula has are written out (fmaf), and round once on either twin.
// - Row reductions (layer norm statistics, softmax max and sum, the softmax backward's dot): over
//   the n elements of one row, kRowLanes lanes; lane l combines elements l, l + 32, l + 64, ... in
//   increasing order starting from the identity (+0.0f for sums, -inf for maxima); then the lanes
//   are combined by the butterfly tree p[l] = p[l] (+) p[l + h] for h = 16, 8, 4, 2, 1 and the
//   result is p[0] (tmath::lane_tree). That is a CUDA warp's __shfl_xor_sync reduction.
// - Column reductions over rows (layer norm's dgamma and dbeta): the fixed order of row_sum in
//   backend/ops_args.h: segments of kRowSumSegment rows; in each, kRowSumLanes lane partials,
//   lane l adding the segment's rows l, l + 16, ... in increasing order from +0.0f, and the
//   segment's sum ((0 + p_0) + p_1) + ... + p_15; the segments' sums added in order from +0.0f,
//   rounded once.
//
// layernorm_forward   per row r of x [rows, C]:
//        mean = (sum_j x_j) / C;  var = (sum_j (x_j - mean)^2) / C  (biased, as PyTorch);
//        rstd = 1 / sqrt(var + eps)  (a correctly rounded sqrt and division, no rsqrt);
//        y_j = round(((x_j - mean) * rstd) * gamma_j + beta_j).
//        mean[r] and rstd[r] are stored in FP32 when the pointers are non-null (the backward needs
//        them). y may be x itself (in place); no other overlap.
// layernorm_backward  with n_j = (x_j - mean) * rstd recomputed from the saved statistics:
//        dn_j = gamma_j * dy_j;  a = (sum_j dn_j) / C;  b = (sum_j dn_j * n_j) / C  (row orders);
//        dx_j = ((dn_j - a) - n_j * b) * rstd, stored as round(dx_j), or with accumulate_dx as
//        round(float(dx_old) + dx_j) (pre-LN: the LN input's gradient is added to the residual
//        stream's gradient);
//        dgamma_j = sum_r n_rj * dy_rj,  dbeta_j = sum_r dy_rj  (column order of row_sum), stored
//        as round(sum) or, with accumulate_dparams, as round(float(old) + sum).
//        Outputs must not overlap the inputs or each other. With accumulate_dparams false, dbeta
//        is bit-identical to row_sum(dy) into the same dtype.
// causal_softmax_forward  for b in [0, batch), i, j in [0, T): dense [batch, T, T] row-major S, P:
//        v_j = scale * float(S[b][i][j]) for j <= i;  m = max_j v_j;  e_j = tmath::exp_f32(v_j - m);
//        P[b][i][j] = round(e_j / sum_k e_k) for j <= i, and +0 for j > i. S above the diagonal is
//        never read (it may hold anything). `scale` is typically 1/sqrt(head dim) (or 1 when the
//        GEMM's alpha already applied it). A NaN in a row makes that row NaN; a row of -inf is NaN
//        (as PyTorch). P may be S itself when the dtypes match; no other overlap.
// causal_softmax_backward  dot = sum_{k <= i} float(dP_k) * float(P_k)  (row order);
//        dS_j = round((scale * P_j) * (dP_j - dot)) for j <= i, +0 for j > i; P and dP above the
//        diagonal are never read. dS may be dP itself when the dtypes match; no other overlap.
// gelu_tanh_forward   y = gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3) (GPT-2's
//        approximation), evaluated as x * sigmoid(2u) = x / (1 + exp(-2u)), the same function
//        without the cancellation of 1 + tanh(u) for negative x (tmath::gelu_tanh). gelu(+inf) =
//        +inf, gelu(-inf) = NaN (as PyTorch's formula). y may be x itself.
// gelu_tanh_backward  dx = round(float(dy) * gelu'(x)), gelu'(x) = s + 2 x s (1 - s) u'(x) with
//        s = sigmoid(2u) (tmath::gelu_tanh_grad); dx may be dy (or x) itself.
// embedding_forward   tokens int32 [B*T], position of row i is t = i % T:
//        x[i][c] = round(float(wte[tok[i]][c]) + float(wpe[t][c]))  (one FP32 addition);
//        wte is [vocab, C], wpe [max_positions, C] (T <= max_positions). A token outside
//        [0, vocab) is a caller's bug the device cannot report synchronously: its row of x is NaN
//        (on both twins), so the loss shows it.
// embedding_backward  dwte[v][c] = round(float(dwte_old[v][c]) + s), s the FP32 sum from +0.0f of
//        dx[i][c] over the positions i with tok[i] == v IN INCREASING i; rows of tokens that do
//        not occur are not touched (dwte ACCUMULATES: GPT-2 ties the LM head to wte, whose weight
//        gradient a GEMM writes first). Tokens outside [0, vocab) are skipped.
//        dwpe[t][c] = round(sum over b = 0, 1, ... of dx[b*T + t][c]) from +0.0f for t < T, and
//        +0 for t in [T, max_positions): dwpe is WRITTEN entirely.
//        Scratch: both twins need reserve(max_tokens, vocab) called beforehand (outside any graph
//        capture) with max_tokens >= B*T and vocab >= this call's vocab; a call beyond the reserve
//        throws. The CUDA twin sorts (token, position) pairs into that scratch (a stable radix
//        sort) and then sums each token's positions in increasing order; the CPU twin uses a
//        stable counting sort. The CUDA twin's scratch is shared by all its calls (one object per
//        stream); the CPU twin serializes its embedding_backward calls with a mutex.
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/ops_args.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "core/hd.h"

namespace amp {

// Lanes of the per-row reductions (see above): a CUDA warp.
constexpr int kRowLanes = 32;
// PyTorch's default LayerNorm epsilon.
constexpr float kLayerNormEps = 1e-5f;

struct LayerNormArgs {
  int64_t rows = 0, C = 0;
  DType type = DType::F32;  // x, gamma, beta, y
  const void* x = nullptr;  // [rows, C]
  const void* gamma = nullptr;
  const void* beta = nullptr;  // [C] each
  void* y = nullptr;           // [rows, C]; may be x
  float* mean = nullptr;       // [rows] FP32, optional (null: not stored)
  float* rstd = nullptr;       // [rows] FP32, optional
  float eps = kLayerNormEps;
};

struct LayerNormBackwardArgs {
  int64_t rows = 0, C = 0;
  DType type = DType::F32;    // dy, x, gamma, dx, dgamma, dbeta
  const void* dy = nullptr;   // [rows, C]
  const void* x = nullptr;    // [rows, C], the forward's input
  const void* gamma = nullptr;  // [C]
  const float* mean = nullptr;  // [rows], from layernorm_forward
  const float* rstd = nullptr;  // [rows]
  void* dx = nullptr;           // [rows, C]
  bool accumulate_dx = false;   // dx = dx_old + dx
  void* dgamma = nullptr;       // [C]
  void* dbeta = nullptr;        // [C]
  bool accumulate_dparams = false;  // dgamma = dgamma_old + sum, dbeta likewise
};

struct CausalSoftmaxArgs {
  int64_t batch = 0, T = 0;  // batch matrices of T x T, dense
  float scale = 1.0f;
  const void* s = nullptr;  // scores [batch, rows, T]
  DType s_type = DType::F32;
  void* p = nullptr;  // probabilities [batch, rows, T]; may be s when the dtypes match
  DType p_type = DType::F32;
  // The matrices' rows (1 <= q_rows <= T; 0: T): the last q_rows rows of each causal T x T matrix,
  // so row r holds query position T - q_rows + r and its first T - q_rows + r + 1 columns are
  // kept (sampling's new tokens against every cached key). A row's bits do not depend on q_rows.
  int64_t q_rows = 0;
  int64_t rows() const { return q_rows == 0 ? T : q_rows; }
};

struct CausalSoftmaxBackwardArgs {
  int64_t batch = 0, T = 0;
  float scale = 1.0f;  // the forward's
  const void* p = nullptr;  // the forward's output [batch, T, T]
  DType p_type = DType::F32;
  const void* dp = nullptr;  // gradient of P [batch, T, T]
  DType dp_type = DType::F32;
  void* ds = nullptr;  // gradient of S [batch, T, T]; may be dp when the dtypes match
  DType ds_type = DType::F32;
};

struct GeluArgs {
  const void* x = nullptr;
  void* y = nullptr;  // may be x
  DType type = DType::F32;
  int64_t n = 0;  // elements
};

struct GeluBackwardArgs {
  const void* x = nullptr;   // the forward's input
  const void* dy = nullptr;  // gradient of y
  void* dx = nullptr;        // may be dy or x
  DType type = DType::F32;
  int64_t n = 0;
};

struct EmbeddingArgs {
  int64_t B = 0, T = 0, C = 0;
  int64_t vocab = 0;          // rows of wte
  int64_t max_positions = 0;  // rows of wpe, >= T
  DType type = DType::F32;    // wte, wpe, x
  const int32_t* tokens = nullptr;  // [B*T]
  const void* wte = nullptr;        // [vocab, C]
  const void* wpe = nullptr;        // [max_positions, C]
  void* x = nullptr;                // [B*T, C]
};

struct EmbeddingBackwardArgs {
  int64_t B = 0, T = 0, C = 0;
  int64_t vocab = 0, max_positions = 0;
  DType type = DType::F32;  // dx, dwte, dwpe
  const int32_t* tokens = nullptr;  // [B*T]
  const void* dx = nullptr;         // [B*T, C]
  void* dwte = nullptr;             // [vocab, C], accumulated into
  void* dwpe = nullptr;             // [max_positions, C], written
};

// ---------------------------------------------------------------- per-element math (both twins)

namespace tmath {

// Host translation units that call these functions must not contract a*b+c into an FMA (GCC does
// by default): the CPU twins' files include src/backend/cpu/no_fp_contract.h first, nvcc gets
// --fmad=false. The functions are static, so each translation unit keeps its own copy compiled
// with its own options (an inline function would be merged with another unit's copy at link time).

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

// 2^k for k in [-126, 127], exactly.
static AMP_HD float pow2i(int k) { return f32_from_bits(uint32_t(k + 127) << 23); }

// exp(x) in FP32 from additions, multiplications, fused multiply-adds and comparisons only
// (Cody-Waite reduction by ln 2 and Cephes' expf polynomial), so host and device give the same
// bits: fmaf rounds once on both (an FMA instruction, CUDA's __fmaf_rn, or libm's exact fmaf
// where the host has none). The reduction's second step, the polynomial's Horner steps and its
// last product are fused (seven roundings and seven vector instructions fewer).
// Within 2 ulp of the exact value for normal results (tests/unit/test_ops_transformer.cpp
// measures it); gradual underflow below 2^-126 (one rounding), +inf above about 88.72, 0 below
// -104, NaN stays NaN.
static AMP_HD float exp_f32(float x) {
  if (!(x == x)) return x + x;  // NaN
  if (x > 88.8f) return f32_from_bits(0x7f800000u);
  if (x < -104.0f) return 0.0f;
  const float kf = x * 1.44269504088896341f;
  const int k = int(kf + (kf >= 0.0f ? 0.5f : -0.5f));  // |k| <= 151
  const float fk = float(k);
  float r = x - fk * 0.693359375f;  // ln 2 = 0.693359375 - 2.12194440e-4: the first product is exact
  r = fmaf(fk, 2.12194440e-4f, r);
  const float r2 = r * r;
  float p = 1.9875691500e-4f;
  p = fmaf(p, r, 1.3981999507e-3f);
  p = fmaf(p, r, 8.3334519073e-3f);
  p = fmaf(p, r, 4.1665795894e-2f);
  p = fmaf(p, r, 1.6666665459e-1f);
  p = fmaf(p, r, 5.0000001201e-1f);
  const float e = fmaf(p, r2, r) + 1.0f;
  // 2^k as two normal powers: e * 2^k1 is exact, the second product rounds once (also into the
  // subnormal range), and overflows to inf where exp does.
  const int k1 = k / 2, k2 = k - k1;
  return e * pow2i(k1) * pow2i(k2);
}

// Layer norm: the normalized value and the output.
static AMP_HD float ln_norm(float x, float mean, float rstd) { return (x - mean) * rstd; }
static AMP_HD float ln_out(float n, float gamma, float beta) { return n * gamma + beta; }
static AMP_HD float ln_rstd(float var, float eps) { return 1.0f / sqrtf(var + eps); }
static AMP_HD float ln_dx(float dn, float a, float n, float b, float rstd) { return ((dn - a) - n * b) * rstd; }

// Softmax backward: (scale * P) * (dP - dot).
static AMP_HD float softmax_ds(float scale, float p, float dp, float dot) { return scale * p * (dp - dot); }

// GELU, tanh approximation: x * sigmoid(2u) (see the header comment). t = exp(-|2u|) in (0, 1]
// gives sigmoid(2u) and 1 - sigmoid(2u) without cancellation or overflow. 2u is computed as
// x (2k + 2kc x^2) (k = sqrt(2/pi), c = 0.044715: three roundings, the sign of x) and 2u' as
// 2k + 6kc x^2, each with one fmaf; the constants are rounded once, here, for both twins.
constexpr float kGelu2K = 2.0f * kSqrt2OverPi;
constexpr float kGelu2KC = kGelu2K * kGeluCubic;
constexpr float kGelu6KC = 3.0f * kGelu2KC;
static AMP_HD float gelu_2u(float x) { return x * fmaf(kGelu2KC, x * x, kGelu2K); }

static AMP_HD float gelu_tanh(float x) {
  const float u2 = gelu_2u(x);
  const float t = exp_f32(-(u2 < 0.0f ? -u2 : u2));
  const float s = u2 >= 0.0f ? 1.0f / (1.0f + t) : t / (1.0f + t);
  return x * s;
}

// gelu'(x) = s + x s (1 - s) 2u'(x), 2u'(x) = 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2). Where s (1 - s)
// is 0 (|u| beyond about 52, or infinite x) the second term is 0, even if u' overflowed.
static AMP_HD float gelu_tanh_grad(float x) {
  const float u2 = gelu_2u(x);
  const float t = exp_f32(-(u2 < 0.0f ? -u2 : u2));
  const float inv = 1.0f / (1.0f + t);
  const float s = u2 >= 0.0f ? inv : t * inv;
  const float oms = u2 >= 0.0f ? t * inv : inv;  // 1 - s
  const float ss = s * oms;
  if (ss == 0.0f) return s;
  return fmaf(x * ss, fmaf(kGelu6KC, x * x, kGelu2K), s);
}

// The butterfly combination of kRowLanes lane partials (the row reductions' order); p is
// overwritten, the result is returned. op(a, b) must be commutative (+ or fmaxf).
template <typename Op>
static AMP_HD float lane_tree(float* p, Op op) {
  for (int h = kRowLanes / 2; h > 0; h /= 2)
    for (int l = 0; l < h; ++l) p[l] = op(p[l], p[l + h]);
  return p[0];
}

}  // namespace tmath

// ---------------------------------------------------------------- validation

inline bool is_act_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// Throws amp::Error (Internal: a caller's bug) naming the first violated rule.
inline void check_args(const LayerNormArgs& a) {
  AMP_CHECK(a.rows >= 0 && a.C >= 0, "layernorm_forward: negative shape rows=", a.rows, " C=", a.C);
  AMP_CHECK(is_act_float(a.type), "layernorm_forward: unsupported dtype ", dtype_name(a.type));
  AMP_CHECK(std::isfinite(a.eps) && a.eps >= 0.0f, "layernorm_forward: eps ", a.eps);
  if (a.rows == 0) return;
  AMP_CHECK(a.C > 0 && a.C < (int64_t(1) << 24), "layernorm_forward: C ", a.C, " (must be in [1, 2^24))");
  AMP_CHECK(a.x && a.gamma && a.beta && a.y, "layernorm_forward: null pointer");
  AMP_CHECK((a.mean == nullptr) == (a.rstd == nullptr), "layernorm_forward: mean and rstd are stored together");
}

inline void check_args(const LayerNormBackwardArgs& a) {
  AMP_CHECK(a.rows >= 0 && a.C >= 0, "layernorm_backward: negative shape rows=", a.rows, " C=", a.C);
  AMP_CHECK(is_act_float(a.type), "layernorm_backward: unsupported dtype ", dtype_name(a.type));
  if (a.C == 0 && a.rows == 0) return;
  AMP_CHECK(a.C > 0 && a.C < (int64_t(1) << 24), "layernorm_backward: C ", a.C, " (must be in [1, 2^24))");
  AMP_CHECK(a.dgamma && a.dbeta && a.dgamma != a.dbeta, "layernorm_backward: dgamma/dbeta null or the same");
  if (a.rows == 0) return;  // dgamma and dbeta get empty sums
  AMP_CHECK(a.dy && a.x && a.gamma && a.mean && a.rstd && a.dx, "layernorm_backward: null pointer");
  AMP_CHECK(a.dx != a.dy && a.dx != a.x && a.dx != a.dgamma && a.dx != a.dbeta,
            "layernorm_backward: dx must not overlap the inputs or dgamma/dbeta");
}

inline void check_args(const CausalSoftmaxArgs& a) {
  AMP_CHECK(a.batch >= 0 && a.T >= 0, "causal_softmax_forward: negative shape batch=", a.batch, " T=", a.T);
  AMP_CHECK(is_act_float(a.s_type) && is_act_float(a.p_type), "causal_softmax_forward: unsupported dtypes");
  AMP_CHECK(std::isfinite(a.scale), "causal_softmax_forward: scale not finite");
  AMP_CHECK(a.q_rows >= 0 && a.q_rows <= a.T, "causal_softmax_forward: q_rows=", a.q_rows, " outside [0, T=", a.T, "]");
  if (a.batch == 0 || a.T == 0) return;
  AMP_CHECK(a.s && a.p, "causal_softmax_forward: null pointer");
  AMP_CHECK(a.p != a.s || a.p_type == a.s_type, "causal_softmax_forward: p aliases s with another dtype");
}

inline void check_args(const CausalSoftmaxBackwardArgs& a) {
  AMP_CHECK(a.batch >= 0 && a.T >= 0, "causal_softmax_backward: negative shape batch=", a.batch, " T=", a.T);
  AMP_CHECK(is_act_float(a.p_type) && is_act_float(a.dp_type) && is_act_float(a.ds_type),
            "causal_softmax_backward: unsupported dtypes");
  AMP_CHECK(std::isfinite(a.scale), "causal_softmax_backward: scale not finite");
  if (a.batch == 0 || a.T == 0) return;
  AMP_CHECK(a.p && a.dp && a.ds, "causal_softmax_backward: null pointer");
  AMP_CHECK(a.ds != a.p, "causal_softmax_backward: ds must not alias p");
  AMP_CHECK(a.ds != a.dp || a.ds_type == a.dp_type, "causal_softmax_backward: ds aliases dp with another dtype");
}

inline void check_args(const GeluArgs& a) {
  AMP_CHECK(a.n >= 0, "gelu_tanh_forward: negative n ", a.n);
  AMP_CHECK(is_act_float(a.type), "gelu_tanh_forward: unsupported dtype ", dtype_name(a.type));
  if (a.n == 0) return;
  AMP_CHECK(a.x && a.y, "gelu_tanh_forward: null pointer");
}

inline void check_args(const GeluBackwardArgs& a) {
  AMP_CHECK(a.n >= 0, "gelu_tanh_backward: negative n ", a.n);
  AMP_CHECK(is_act_float(a.type), "gelu_tanh_backward: unsupported dtype ", dtype_name(a.type));
  if (a.n == 0) return;
  AMP_CHECK(a.x && a.dy && a.dx, "gelu_tanh_backward: null pointer");
}

namespace detail {
inline void check_embedding_shape(const char* what, int64_t B, int64_t T, int64_t C, int64_t vocab,
                                  int64_t max_positions, DType type) {
  AMP_CHECK(B >= 0 && T >= 0 && C >= 0 && vocab >= 0 && max_positions >= 0, what, ": negative shape B=", B,
            " T=", T, " C=", C, " vocab=", vocab, " max_positions=", max_positions);
  AMP_CHECK(is_act_float(type), what, ": unsupported dtype ", dtype_name(type));
  AMP_CHECK(T <= max_positions, what, ": T ", T, " > max_positions ", max_positions);
  AMP_CHECK(vocab < int64_t(INT32_MAX), what, ": vocab ", vocab, " (must be below 2^31 - 1)");
  AMP_CHECK(B == 0 || T <= int64_t(INT32_MAX) / B, what, ": B*T ", B, "*", T, " exceeds int32 positions");
}
}  // namespace detail

inline void check_args(const EmbeddingArgs& a) {
  detail::check_embedding_shape("embedding_forward", a.B, a.T, a.C, a.vocab, a.max_positions, a.type);
  if (a.B * a.T == 0 || a.C == 0) return;
  AMP_CHECK(a.tokens && a.wte && a.wpe && a.x, "embedding_forward: null pointer");
}

inline void check_args(const EmbeddingBackwardArgs& a) {
  detail::check_embedding_shape("embedding_backward", a.B, a.T, a.C, a.vocab, a.max_positions, a.type);
  if (a.C == 0) return;
  if (a.max_positions > 0) AMP_CHECK(a.dwpe != nullptr, "embedding_backward: dwpe is null");
  if (a.B * a.T == 0) return;
  AMP_CHECK(a.tokens && a.dx && a.dwte && a.dwpe, "embedding_backward: null pointer");
  AMP_CHECK(a.dwte != a.dx && a.dwpe != a.dx && a.dwte != a.dwpe, "embedding_backward: outputs alias");
}

}  // namespace amp
