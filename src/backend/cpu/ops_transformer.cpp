// No contraction of a*b+c into an FMA in this file (GCC contracts by default, also in ISO mode):
// the CUDA twin is compiled with --fmad=false, and both must round every product and sum alike.
// Before any include, so every function of this translation unit has the same options.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "backend/cpu/ops_transformer.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <vector>

#include "backend/cpu/float_rows.h"
#include "core/convert.h"
#include "core/error.h"

namespace amp::cpu {

namespace {

constexpr int64_t kBlock = 2048;              // elements per GELU work block
constexpr int64_t kParallelMin = 4 * kBlock;  // fork threads only for at least this many elements

#if defined(__AVX2__)
// The scalar functions of transformer_args.h (tmath::exp_f32, gelu_tanh, gelu_tanh_grad) on 8
// lanes, operation for operation (no contraction, the same constants, branches as blends), so the
// vector path gives the scalar path's bits: the CUDA twin and every thread count agree with it.
inline __m256 exp_f32_8(__m256 x) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256 kf = _mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f));
  const __m256 half = _mm256_blendv_ps(_mm256_set1_ps(-0.5f), _mm256_set1_ps(0.5f), _mm256_cmp_ps(kf, zero, _CMP_GE_OQ));
  // Lanes outside [-104, 88.8] or NaN are replaced below; keep their k in range meanwhile.
  const __m256 kin = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(kf, half), _mm256_set1_ps(-200.0f)), _mm256_set1_ps(200.0f));
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
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(e, p1), p2);
  y = _mm256_blendv_ps(y, zero, _mm256_cmp_ps(x, _mm256_set1_ps(-104.0f), _CMP_LT_OQ));
  y = _mm256_blendv_ps(y, _mm256_set1_ps(std::numeric_limits<float>::infinity()),
                       _mm256_cmp_ps(x, _mm256_set1_ps(88.8f), _CMP_GT_OQ));
  return _mm256_blendv_ps(y, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));  // NaN
}

inline __m256 gelu_u8(__m256 x) {
  const __m256 cube = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  return _mm256_mul_ps(_mm256_set1_ps(tmath::kSqrt2OverPi),
                       _mm256_add_ps(x, _mm256_mul_ps(_mm256_set1_ps(tmath::kGeluCubic), cube)));
}

// t = exp(-2|u|), and the sign test of u.
inline __m256 gelu_t8(__m256 u, __m256* u_ge0) {
  const __m256 neg = _mm256_cmp_ps(u, _mm256_setzero_ps(), _CMP_LT_OQ);
  const __m256 absu = _mm256_blendv_ps(u, _mm256_sub_ps(_mm256_setzero_ps(), u), neg);  // u < 0 ? -u : u
  *u_ge0 = _mm256_cmp_ps(u, _mm256_setzero_ps(), _CMP_GE_OQ);
  return exp_f32_8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), absu));
}

inline __m256 gelu_tanh8(__m256 x) {
  __m256 ge0;
  const __m256 t = gelu_t8(gelu_u8(x), &ge0);
  const __m256 one = _mm256_set1_ps(1.0f), den = _mm256_add_ps(one, t);
  const __m256 s = _mm256_blendv_ps(_mm256_div_ps(t, den), _mm256_div_ps(one, den), ge0);
  return _mm256_mul_ps(x, s);
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


void load(const void* p, DType t, int64_t off, int64_t n, float* dst) {
  convert(at(p, t, off), t, dst, DType::F32, size_t(n));
}
void store(const float* src, void* p, DType t, int64_t off, int64_t n) {
  convert(src, DType::F32, at(p, t, off), t, size_t(n));
}

float add_op(float a, float b) { return a + b; }
// std::fmax(a, b) as glibc computes it (maxss: b on ties; a NaN operand is ignored), inlined: the
// library call was 1-2% of a GPT step.
float max_op(float a, float b) { return b != b ? a : (a > b ? a : b); }

// The row reductions of transformer_args.h: lane l combines f(l), f(l + 32), ... from `init`, then
// the butterfly tree.
template <typename F, typename Op>
float lane_reduce(int64_t n, float init, F&& f, Op op) {
  float p[kRowLanes];
  for (float& v : p) v = init;
  int64_t j0 = 0;
  for (; j0 + kRowLanes <= n; j0 += kRowLanes)
    for (int l = 0; l < kRowLanes; ++l) p[l] = op(p[l], f(j0 + l));
  for (int l = 0; j0 + l < n; ++l) p[l] = op(p[l], f(j0 + l));
  return tmath::lane_tree(p, op);
}

template <typename F>
float lane_sum(int64_t n, F&& f) {
  return lane_reduce(n, 0.0f, f, add_op);
}

std::vector<float> to_floats(const void* p, DType t, int64_t n) {
  std::vector<float> v(size_t(std::max<int64_t>(n, 1)));
  if (n > 0) load(p, t, 0, n, v.data());
  return v;
}

}  // namespace

struct TransformerOps::Impl {
  std::mutex mu;  // embedding_backward's scratch
  int64_t max_tokens = 0, vocab = 0;
  std::vector<int64_t> start;    // [vocab + 1]: segment starts of the counting sort
  std::vector<int64_t> cursor;   // [vocab]
  std::vector<int32_t> order;    // [max_tokens]: positions sorted by token, increasing within a token
  std::vector<int32_t> present;  // tokens that occur, increasing
};

TransformerOps::TransformerOps() : impl_(std::make_unique<Impl>()) {}
TransformerOps::~TransformerOps() = default;

void TransformerOps::reserve(int64_t max_tokens, int64_t vocab) {
  AMP_CHECK(max_tokens >= 0 && max_tokens <= int64_t(INT32_MAX) && vocab >= 0 && vocab < int64_t(INT32_MAX),
            "reserve: max_tokens ", max_tokens, " vocab ", vocab, " out of range");
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  s.max_tokens = std::max(s.max_tokens, max_tokens);
  s.vocab = std::max(s.vocab, vocab);
  s.start.resize(size_t(s.vocab + 1));
  s.cursor.resize(size_t(s.vocab));
  s.order.resize(size_t(s.max_tokens));
  s.present.reserve(size_t(std::min(s.max_tokens, s.vocab)));
}

// ---------------------------------------------------------------- row reductions

namespace {

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
float lane_reduce_rows(const float* v, int64_t n, float init, VOp vop, Op op) {
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

float row_max(const float* v, int64_t n) {
#if defined(__AVX2__)
  return lane_reduce_rows(v, n, -std::numeric_limits<float>::infinity(), fmax8, max_op);
#else
  return lane_reduce(n, -std::numeric_limits<float>::infinity(), [&](int64_t j) { return v[j]; }, max_op);
#endif
}

float row_sum(const float* v, int64_t n) {
#if defined(__AVX2__)
  return lane_reduce_rows(v, n, 0.0f, add8, add_op);
#else
  return lane_sum(n, [&](int64_t j) { return v[j]; });
#endif
}

}  // namespace

// ---------------------------------------------------------------- layer norm

void TransformerOps::layernorm_forward(const LayerNormArgs& a) {
  check_args(a);
  if (a.rows == 0) return;
  const int64_t C = a.C;
  const std::vector<float> gamma = to_floats(a.gamma, a.type, C), beta = to_floats(a.beta, a.type, C);
  const float c_den = float(C);
#pragma omp parallel if (a.rows * C >= kParallelMin && a.rows > 1)
  {
    // The elementwise loops below vectorize (no contraction in this file: each lane rounds as the
    // scalar specification); the sums are row_sum's 8-wide lanes.
    std::vector<float> v(static_cast<size_t>(C)), sq(static_cast<size_t>(C));
    const float* g = gamma.data();
    const float* be = beta.data();
#pragma omp for schedule(static)
    for (int64_t r = 0; r < a.rows; ++r) {
      const float* x = row_in(a.x, a.type, r * C, C, v.data());
      const float mean = row_sum(x, C) / c_den;
      float* d2 = sq.data();
      for (int64_t j = 0; j < C; ++j) {
        const float d = x[j] - mean;
        d2[j] = d * d;
      }
      const float var = row_sum(d2, C) / c_den;
      const float rstd = tmath::ln_rstd(var, a.eps);
      float* y = row_out(a.y, a.type, r * C, v.data());  // x may be y: each element is read before it is written
      for (int64_t j = 0; j < C; ++j) y[j] = tmath::ln_out(tmath::ln_norm(x[j], mean, rstd), g[j], be[j]);
      row_store(v.data(), a.y, a.type, r * C, C);
      if (a.mean) {
        a.mean[r] = mean;
        a.rstd[r] = rstd;
      }
    }
  }
}

void TransformerOps::layernorm_backward(const LayerNormBackwardArgs& a) {
  check_args(a);
  if (a.C == 0) return;
  const int64_t C = a.C, rows = a.rows;
  const float c_den = float(C);
  // dgamma, dbeta: kRowSumLanes lane partials per column, lane l adding rows l, l + L, ... (the
  // order of row_sum); work items are (column tile, lane) pairs.
  {
    constexpr int64_t L = kRowSumLanes;
    std::vector<float> pg(size_t(L * C), 0.0f), pb(size_t(L * C), 0.0f);
    const int64_t tiles = (C + kTile - 1) / kTile, items = tiles * L;
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin && items > 1)
    for (int64_t w = 0; w < items; ++w) {
      const int64_t tile = w / L, lane = w % L;
      const int64_t c0 = tile * kTile, len = std::min(kTile, C - c0);
      float* ag = pg.data() + lane * C + c0;
      float* ab = pb.data() + lane * C + c0;
      alignas(64) float xb[kTile], db[kTile];
      for (int64_t r = lane; r < rows; r += L) {
        const float* xv = row_in(a.x, a.type, r * C + c0, len, xb);
        const float* dv = row_in(a.dy, a.type, r * C + c0, len, db);
        const float mean = a.mean[r], rstd = a.rstd[r];
        for (int64_t j = 0; j < len; ++j) {
          ag[j] += tmath::ln_norm(xv[j], mean, rstd) * dv[j];
          ab[j] += dv[j];
        }
      }
    }
    std::vector<float> sg(static_cast<size_t>(C)), sb(static_cast<size_t>(C));
    for (int64_t j = 0; j < C; ++j) {
      float g = 0.0f, b = 0.0f;
      for (int64_t l = 0; l < L; ++l) {
        g += pg[size_t(l * C + j)];
        b += pb[size_t(l * C + j)];
      }
      sg[size_t(j)] = g;
      sb[size_t(j)] = b;
    }
    if (a.accumulate_dparams) {
      const std::vector<float> og = to_floats(a.dgamma, a.type, C), ob = to_floats(a.dbeta, a.type, C);
      for (int64_t j = 0; j < C; ++j) {
        sg[size_t(j)] = og[size_t(j)] + sg[size_t(j)];
        sb[size_t(j)] = ob[size_t(j)] + sb[size_t(j)];
      }
    }
    store(sg.data(), a.dgamma, a.type, 0, C);
    store(sb.data(), a.dbeta, a.type, 0, C);
  }
  if (rows == 0) return;
  // dx, one row per work item.
  const std::vector<float> gamma = to_floats(a.gamma, a.type, C);
#pragma omp parallel if (rows * C >= kParallelMin && rows > 1)
  {
    // As the forward: vectorizing elementwise loops, row_sum's lanes; FP32 dx in place.
    const size_t c = static_cast<size_t>(C);
    std::vector<float> xin(c), dyin(c), nrm(c), dnv(c), prod(c), out(c), oldin(a.accumulate_dx ? c : 0);
    const float* g = gamma.data();
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = row_in(a.x, a.type, r * C, C, xin.data());
      const float* dy = row_in(a.dy, a.type, r * C, C, dyin.data());
      const float mean = a.mean[r], rstd = a.rstd[r];
      float* n = nrm.data();
      float* dn = dnv.data();
      float* p = prod.data();
      for (int64_t j = 0; j < C; ++j) {
        n[j] = tmath::ln_norm(x[j], mean, rstd);
        dn[j] = g[j] * dy[j];
        p[j] = dn[j] * n[j];
      }
      const float ma = row_sum(dn, C) / c_den;
      const float mb = row_sum(p, C) / c_den;
      const float* old = a.accumulate_dx ? row_in(a.dx, a.type, r * C, C, oldin.data()) : nullptr;
      float* dx = row_out(a.dx, a.type, r * C, out.data());  // FP32: old[j] is read before dx[j] is written
      if (old) {
        for (int64_t j = 0; j < C; ++j) dx[j] = old[j] + tmath::ln_dx(dn[j], ma, n[j], mb, rstd);
      } else {
        for (int64_t j = 0; j < C; ++j) dx[j] = tmath::ln_dx(dn[j], ma, n[j], mb, rstd);
      }
      row_store(out.data(), a.dx, a.type, r * C, C);
    }
  }
}

// ---------------------------------------------------------------- causal softmax

void TransformerOps::causal_softmax_forward(const CausalSoftmaxArgs& a) {
  check_args(a);
  if (a.batch == 0 || a.T == 0) return;
  const int64_t T = a.T, rows = a.batch * T;
#pragma omp parallel if (rows * T >= 2 * kParallelMin && rows > 1)
  {
    std::vector<float> in(static_cast<size_t>(T)), out(static_cast<size_t>(T));
#pragma omp for schedule(static)
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t n = row % T + 1;  // j <= i
      const float* s = row_in(a.s, a.s_type, row * T, n, in.data());
      // An FP32 output row is written in place; another type goes through `out`.
      float* v = row_out(a.p, a.p_type, row * T, out.data());
      int64_t j = 0;
#if defined(__AVX2__)
      const __m256 scale = _mm256_set1_ps(a.scale);
      for (; j + 8 <= n; j += 8) _mm256_storeu_ps(v + j, _mm256_mul_ps(scale, _mm256_loadu_ps(s + j)));
#endif
      for (; j < n; ++j) v[j] = a.scale * s[j];
      const float m = row_max(v, n);
      j = 0;
#if defined(__AVX2__)
      const __m256 vm = _mm256_set1_ps(m);
      for (; j + 8 <= n; j += 8) _mm256_storeu_ps(v + j, exp_f32_8(_mm256_sub_ps(_mm256_loadu_ps(v + j), vm)));
#endif
      for (; j < n; ++j) v[j] = tmath::exp_f32(v[j] - m);
      const float sum = row_sum(v, n);
      j = 0;
#if defined(__AVX2__)
      const __m256 vs = _mm256_set1_ps(sum);
      for (; j + 8 <= n; j += 8) _mm256_storeu_ps(v + j, _mm256_div_ps(_mm256_loadu_ps(v + j), vs));
#endif
      for (; j < n; ++j) v[j] = v[j] / sum;
      std::fill(v + n, v + T, 0.0f);
      row_store(v, a.p, a.p_type, row * T, T);
    }
  }
}

void TransformerOps::causal_softmax_backward(const CausalSoftmaxBackwardArgs& a) {
  check_args(a);
  if (a.batch == 0 || a.T == 0) return;
  const int64_t T = a.T, rows = a.batch * T;
#pragma omp parallel if (rows * T >= 2 * kParallelMin && rows > 1)
  {
    std::vector<float> pbuf(static_cast<size_t>(T)), dpbuf(static_cast<size_t>(T)), prod(static_cast<size_t>(T)),
        out(static_cast<size_t>(T));
#pragma omp for schedule(static)
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t n = row % T + 1;
      const float* p = row_in(a.p, a.p_type, row * T, n, pbuf.data());
      const float* dp = row_in(a.dp, a.dp_type, row * T, n, dpbuf.data());
      float* ds = row_out(a.ds, a.ds_type, row * T, out.data());
      // dot = sum of dp * p (the products rounded, then summed in lanes)
      int64_t j = 0;
#if defined(__AVX2__)
      for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(prod.data() + j, _mm256_mul_ps(_mm256_loadu_ps(dp + j), _mm256_loadu_ps(p + j)));
#endif
      for (; j < n; ++j) prod[size_t(j)] = dp[j] * p[j];
      const float dot = row_sum(prod.data(), n);
      j = 0;
#if defined(__AVX2__)
      const __m256 scale = _mm256_set1_ps(a.scale), vdot = _mm256_set1_ps(dot);
      for (; j + 8 <= n; j += 8)  // tmath::softmax_ds: scale * p * (dp - dot)
        _mm256_storeu_ps(ds + j, _mm256_mul_ps(_mm256_mul_ps(scale, _mm256_loadu_ps(p + j)),
                                               _mm256_sub_ps(_mm256_loadu_ps(dp + j), vdot)));
#endif
      for (; j < n; ++j) ds[j] = tmath::softmax_ds(a.scale, p[j], dp[j], dot);
      std::fill(ds + n, ds + T, 0.0f);
      row_store(ds, a.ds, a.ds_type, row * T, T);
    }
  }
}

// ---------------------------------------------------------------- GELU (tanh approximation)

void TransformerOps::gelu_tanh_forward(const GeluArgs& a) {
  check_args(a);
  const int64_t n = a.n, nb = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t blk = 0; blk < nb; ++blk) {
    alignas(64) float buf[kBlock];
    const int64_t off = blk * kBlock, len = std::min(kBlock, n - off);
    const float* x = row_in(a.x, a.type, off, len, buf);  // FP32: read and written in place
    float* y = row_out(a.y, a.type, off, buf);
    int64_t i = 0;
#if defined(__AVX2__)
    for (; i + 8 <= len; i += 8) _mm256_storeu_ps(y + i, gelu_tanh8(_mm256_loadu_ps(x + i)));
#endif
    for (; i < len; ++i) y[i] = tmath::gelu_tanh(x[i]);
    row_store(buf, a.y, a.type, off, len);
  }
}

void TransformerOps::gelu_tanh_backward(const GeluBackwardArgs& a) {
  check_args(a);
  const int64_t n = a.n, nb = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t blk = 0; blk < nb; ++blk) {
    alignas(64) float xbuf[kBlock], gbuf[kBlock];
    const int64_t off = blk * kBlock, len = std::min(kBlock, n - off);
    const float* x = row_in(a.x, a.type, off, len, xbuf);  // FP32: read and written in place
    const float* dy = row_in(a.dy, a.type, off, len, gbuf);
    float* dx = row_out(a.dx, a.type, off, gbuf);
    int64_t i = 0;
#if defined(__AVX2__)
    for (; i + 8 <= len; i += 8)
      _mm256_storeu_ps(dx + i, _mm256_mul_ps(_mm256_loadu_ps(dy + i), gelu_tanh_grad8(_mm256_loadu_ps(x + i))));
#endif
    for (; i < len; ++i) dx[i] = dy[i] * tmath::gelu_tanh_grad(x[i]);
    row_store(gbuf, a.dx, a.type, off, len);
  }
}

// ---------------------------------------------------------------- embedding

void TransformerOps::embedding_forward(const EmbeddingArgs& a) {
  check_args(a);
  const int64_t N = a.B * a.T, C = a.C;
  if (N == 0 || C == 0) return;
#pragma omp parallel if (N * C >= kParallelMin && N > 1)
  {
    std::vector<float> v(static_cast<size_t>(C)), w(static_cast<size_t>(C));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      const int64_t tok = a.tokens[i];
      if (tok < 0 || tok >= a.vocab) {
        std::fill(v.begin(), v.end(), kQuietNaN);  // a caller's bug, shown in the loss
      } else {
        load(a.wte, a.type, tok * C, C, v.data());
        load(a.wpe, a.type, (i % a.T) * C, C, w.data());
        for (int64_t j = 0; j < C; ++j) v[size_t(j)] = v[size_t(j)] + w[size_t(j)];
      }
      store(v.data(), a.x, a.type, i * C, C);
    }
  }
}

void TransformerOps::embedding_backward(const EmbeddingBackwardArgs& a) {
  check_args(a);
  const int64_t N = a.B * a.T, C = a.C, T = a.T;
  if (C == 0) return;
  const int64_t tiles = (C + kTile - 1) / kTile;
  // dwpe: written entirely; row t < T is the sum over b in increasing order.
  {
    const int64_t items = a.max_positions * tiles;
#pragma omp parallel for schedule(static) if (a.max_positions * C >= kParallelMin && items > 1)
    for (int64_t w = 0; w < items; ++w) {
      const int64_t t = w / tiles, c0 = (w % tiles) * kTile, len = std::min(kTile, C - c0);
      alignas(64) float acc[kTile], v[kTile];
      std::fill(acc, acc + len, 0.0f);
      if (t < T)
        for (int64_t b = 0; b < a.B; ++b) {
          load(a.dx, a.type, (b * T + t) * C + c0, len, v);
          for (int64_t j = 0; j < len; ++j) acc[j] += v[j];
        }
      store(acc, a.dwpe, a.type, t * C + c0, len);
    }
  }
  if (N == 0) return;
  // dwte: a stable counting sort of the positions by token, then each (token, column tile) sums
  // its positions in increasing order and adds the sum to the old value.
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  AMP_CHECK(N <= s.max_tokens && a.vocab <= s.vocab, "embedding_backward: B*T = ", N, " and vocab ", a.vocab,
            " exceed the reserve (", s.max_tokens, " tokens, vocab ", s.vocab, "): call reserve() first");
  const int64_t V = a.vocab;
  std::fill(s.start.begin(), s.start.begin() + V + 1, 0);
  for (int64_t i = 0; i < N; ++i) {
    const int64_t tok = a.tokens[i];
    if (tok >= 0 && tok < V) ++s.start[size_t(tok + 1)];
  }
  s.present.clear();
  for (int64_t v = 0; v < V; ++v) {
    if (s.start[size_t(v + 1)] > 0) s.present.push_back(int32_t(v));
    s.start[size_t(v + 1)] += s.start[size_t(v)];
  }
  std::copy(s.start.begin(), s.start.begin() + V, s.cursor.begin());
  for (int64_t i = 0; i < N; ++i) {
    const int64_t tok = a.tokens[i];
    if (tok >= 0 && tok < V) s.order[size_t(s.cursor[size_t(tok)]++)] = int32_t(i);
  }
  const int64_t items = int64_t(s.present.size()) * tiles;
#pragma omp parallel for schedule(dynamic, 1) if (N * C >= kParallelMin && items > 1)
  for (int64_t w = 0; w < items; ++w) {
    const int64_t v = s.present[size_t(w / tiles)], c0 = (w % tiles) * kTile, len = std::min(kTile, C - c0);
    alignas(64) float acc[kTile], x[kTile];
    std::fill(acc, acc + len, 0.0f);
    for (int64_t k = s.start[size_t(v)]; k < s.start[size_t(v + 1)]; ++k) {
      load(a.dx, a.type, int64_t(s.order[size_t(k)]) * C + c0, len, x);
      for (int64_t j = 0; j < len; ++j) acc[j] += x[j];
    }
    load(a.dwte, a.type, v * C + c0, len, x);
    for (int64_t j = 0; j < len; ++j) x[j] = x[j] + acc[j];
    store(x, a.dwte, a.type, v * C + c0, len);
  }
}

}  // namespace amp::cpu
