#include "backend/cpu/kernels.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/row_kernels.h"
#include "core/aligned_vector.h"
#include "core/convert.h"
#include "core/error.h"
#include "core/half.h"
#include "core/prefetch.h"

namespace amp::cpu {

namespace {

char* at(const void* p, DType t, size_t i) { return static_cast<char*>(const_cast<void*>(p)) + i * dtype_size(t); }

void load(const void* src, DType t, size_t off, size_t n, float* out) { convert(at(src, t, off), t, out, DType::F32, n); }
void store(const float* in, void* dst, DType t, size_t off, size_t n) { convert(in, DType::F32, at(dst, t, off), t, n); }

size_t n_blocks(size_t n) { return (n + kBlock - 1) / kBlock; }
// Only fork threads when there is enough work to pay for it.
bool worth_parallel(size_t n) { return n >= 4 * kBlock; }

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

// Non-finite test on raw bits: the exponent field is all ones.
inline bool nonfinite16(uint16_t x, DType t) {
  return t == DType::F16 ? (x & 0x7c00u) == 0x7c00u : (x & 0x7f80u) == 0x7f80u;
}

bool span_has_nonfinite(const void* grads, DType t, size_t b, size_t e) {
  if (t == DType::F32) {
    const uint32_t* p = static_cast<const uint32_t*>(grads);
    uint32_t any = 0;
    for (size_t i = b; i < e; ++i) any |= ((p[i] & 0x7f800000u) == 0x7f800000u);
    return any;
  }
  const uint16_t* p = static_cast<const uint16_t*>(grads);
  uint32_t any = 0;
  for (size_t i = b; i < e; ++i) any |= nonfinite16(p[i], t);
  return any;
}

// out = float(g[0..len)) * inv. kStats: also returns whether any result is non-finite and adds
// the sum of squares to *sum (the fused check); without, the values alone (the optimizer's passes,
// after that check: the BF16 char GPT's optimizer phase 6.0-6.4 -> 5.8-6.2 ms at 2 threads against
// computing the unused statistics). One pass over the 16-bit block; squares accumulate in double
// lanes within the block and across blocks, in a fixed order, so the result does not depend on the
// thread count. The unscaled value of a NaN input is some NaN.
#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
inline __m256 load8(const void* g, DType t, size_t j) {
  if (t == DType::F32) return _mm256_loadu_ps(static_cast<const float*>(g) + j);
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(g) + j));
  if (t == DType::F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
#endif

template <bool kStats>
bool unscale_block(const void* g, DType t, size_t begin, size_t len, float inv, float* __restrict out, double* sum) {
  size_t j = 0;
  double s = 0.0;
  uint32_t bad = 0;
#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256 exp_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7f800000));
  __m256 nonfinite = _mm256_setzero_ps();
  // Squares in double (exact: a float's square fits a double's mantissa), summed in double, as the
  // CUDA pass does: the norm then hardly depends on how the elements are cut into chunks (sharded
  // optimizer state cuts them differently).
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  const size_t es = dtype_size(t);
  const char* bytes = static_cast<const char*>(g) + begin * es;
  for (; j + 8 <= len; j += 8) {
    prefetch_ahead(bytes + j * es);  // 2.4x on BF16 gradients, 1.9x on FP32 (prefetch.h)
    const __m256 a = _mm256_mul_ps(load8(g, t, begin + j), vinv);
    if (out) _mm256_storeu_ps(out + j, a);
    if constexpr (kStats) {
      nonfinite = _mm256_or_ps(nonfinite, _mm256_cmp_ps(_mm256_and_ps(a, exp_mask), exp_mask, _CMP_EQ_OQ));
      const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(a)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1));
      acc0 = _mm256_fmadd_pd(lo, lo, acc0);
      acc1 = _mm256_fmadd_pd(hi, hi, acc1);
    }
  }
  if constexpr (kStats) {
    bad = uint32_t(_mm256_movemask_ps(nonfinite) != 0);
    alignas(32) double lanes[4];
    _mm256_store_pd(lanes, _mm256_add_pd(acc0, acc1));
    for (double l : lanes) s += l;
  }
#endif
  for (; j < len; ++j) {
    float v;
    convert(static_cast<const char*>(g) + (begin + j) * dtype_size(t), t, &v, DType::F32, 1);
    v *= inv;
    if (out) out[j] = v;
    if constexpr (kStats) {
      bad |= uint32_t(!(v - v == 0.0f));
      s += double(v) * double(v);
    }
  }
  if constexpr (kStats) *sum += s;
  return bad != 0;
}

// Work list: (tensor, begin, end) chunks of at most kBlock elements, in tensor order.
struct Chunk {
  int32_t tensor;
  size_t begin, end;
};
std::vector<Chunk> chunks_of(const std::vector<TensorSpan>& spans, size_t lo, size_t hi) {
  std::vector<Chunk> out;
  for (size_t t = 0; t < spans.size(); ++t) {
    const size_t b = std::max(lo, spans[t].offset), e = std::min(hi, spans[t].offset + spans[t].count);
    for (size_t i = b; i < e; i += kBlock) out.push_back({int32_t(t), i, std::min(e, i + kBlock)});
  }
  return out;
}

}  // namespace

void activation_forward(Activation a, const Tensor& z, const Tensor& y) {
  AMP_CHECK(z.numel() == y.numel(), "activation_forward: size mismatch");
  const size_t n = z.numel(), nb = n_blocks(n);
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (size_t blk = 0; blk < nb; ++blk) {
    alignas(64) float v[kBlock];
    const size_t off = blk * kBlock, len = std::min(kBlock, n - off);
    load(z.data, z.dtype, off, len, v);
    if (a == Activation::Relu) {
      for (size_t i = 0; i < len; ++i) v[i] = v[i] > 0.0f ? v[i] : (v[i] != v[i] ? v[i] : 0.0f);
    } else {
      for (size_t i = 0; i < len; ++i) v[i] = 0.5f * v[i] * (1.0f + std::erf(v[i] * kInvSqrt2));
    }
    store(v, y.data, y.dtype, off, len);
  }
}

void activation_backward(Activation a, const Tensor& z, const Tensor& dy, const Tensor& dz) {
  AMP_CHECK(z.numel() == dy.numel() && dy.numel() == dz.numel(), "activation_backward: size mismatch");
  const size_t n = z.numel(), nb = n_blocks(n);
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (size_t blk = 0; blk < nb; ++blk) {
    alignas(64) float zv[kBlock], g[kBlock];
    const size_t off = blk * kBlock, len = std::min(kBlock, n - off);
    load(z.data, z.dtype, off, len, zv);
    load(dy.data, dy.dtype, off, len, g);
    if (a == Activation::Relu) {
      for (size_t i = 0; i < len; ++i) g[i] = zv[i] > 0.0f ? g[i] : 0.0f;
    } else {
      for (size_t i = 0; i < len; ++i) {
        const float x = zv[i];
        const float cdf = 0.5f * (1.0f + std::erf(x * kInvSqrt2));
        const float pdf = kInvSqrt2Pi * std::exp(-0.5f * x * x);
        g[i] *= cdf + x * pdf;
      }
    }
    store(g, dz.data, dz.dtype, off, len);
  }
}

void bias_grad(const Tensor& dy, const Tensor& db) {
  const size_t rows = dy.rows, cols = dy.cols;
  AMP_CHECK(db.numel() == cols, "bias_grad: size mismatch");
  // Each column summed over all rows in row order; parallel over column strips, one per thread
  // where that keeps them between kMinStrip and kStrip columns wide (the order, and so the bits, do
  // not depend on the strips). A row's part is widened and added in one pass (widen_add: a
  // conversion into a buffer, then a second loop adding it, took 1.3-1.6x as long in BF16).
  constexpr size_t kStrip = 4096, kMinStrip = 64;
  const size_t per_thread = (cols + size_t(omp_get_max_threads()) - 1) / size_t(omp_get_max_threads());
  const size_t strip = std::clamp((per_thread + 15) / 16 * 16, kMinStrip, kStrip);
  const size_t nb = (cols + strip - 1) / strip;
#pragma omp parallel for schedule(static) if (rows * cols >= 4 * kBlock && nb > 1)
  for (size_t blk = 0; blk < nb; ++blk) {
    alignas(64) float acc[kStrip];
    const size_t c0 = blk * strip, len = std::min(strip, cols - c0);
    std::fill(acc, acc + len, 0.0f);
    const size_t es = dtype_size(dy.dtype);
    for (size_t r = 0; r < rows; ++r) {
      // A strip narrower than the row leaves gaps the hardware prefetcher does not cross: fetch the
      // strip of the row after next ahead (a whole row needs no help: 15% slower with it).
      if (len < cols && r + 2 < rows)
        prefetch_row(static_cast<const char*>(dy.data) + ((r + 2) * cols + c0) * es, int64_t(len * es));
      widen_add(at(dy.data, dy.dtype, r * cols + c0), dy.dtype, acc, len);
    }
    store(acc, db.data, db.dtype, c0, len);
  }
}

void softmax_xent(const SoftmaxXentArgs& a, double* loss_sum, int64_t* correct) {
  check_args(a);
  const int64_t rows = a.rows, c = a.classes;
  const float gmul = *a.scale * a.inv_count;
  const RowKernels& kern = active_row_kernels();
  // Each row's loss and hit, then their sums in row order: the same bits at any thread count.
  std::vector<double> row_loss(static_cast<size_t>(rows));
  std::vector<uint8_t> row_hit(static_cast<size_t>(rows));
#pragma omp parallel if (rows * c >= 4 * int64_t(kBlock) && rows > 1)
  {
    aligned_vector<float> x(static_cast<size_t>(c)), p(static_cast<size_t>(c));  // the row in FP32, its softmax
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      load(a.logits, a.logits_type, size_t(r * a.ld_logits), size_t(c), x.data());
      float stats[2];  // m, s
      kern.softmax_forward(x.data(), 1.0f, p.data(), c, stats);
      const float m = stats[0];
      int64_t arg = 0;
      if (!std::isnan(x[0]))
        while (arg < c && !(x[size_t(arg)] == m)) ++arg;
      const int32_t y = a.labels[r];
      const bool valid = y >= 0 && int64_t(y) < c;  // else a NaN loss, no hit, no -1 term (the CUDA twin's)
      row_loss[size_t(r)] = valid ? (double(m) + std::log(double(stats[1]))) - double(x[size_t(y)])
                                  : std::numeric_limits<double>::quiet_NaN();
      row_hit[size_t(r)] = valid && arg == y;
      if (a.dlogits) {
        const float py = valid ? p[size_t(y)] : 0.0f;
        for (int64_t j = 0; j < c; ++j) p[size_t(j)] = p[size_t(j)] * gmul;  // p_j - 0 is p_j
        if (valid) p[size_t(y)] = (py - 1.0f) * gmul;
        store(p.data(), a.dlogits, a.dlogits_type, size_t(r * a.ld_dlogits), size_t(c));
      }
    }
  }
  double loss = 0.0;
  int64_t hits = 0;
  for (int64_t r = 0; r < rows; ++r) loss += row_loss[size_t(r)], hits += row_hit[size_t(r)];
  *loss_sum += loss;
  *correct += hits;
}

void mse(const Tensor& pred, const Tensor& target, float scale, float inv_count, const Tensor& dpred,
         double* loss_sum) {
  AMP_CHECK(pred.numel() == target.numel() && target.dtype == DType::F32, "mse: bad target");
  const size_t n = pred.numel(), nb = n_blocks(n);
  const float gmul = 2.0f * scale * inv_count;
  std::vector<double> part(nb, 0.0);
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (size_t blk = 0; blk < nb; ++blk) {
    alignas(64) float v[kBlock];
    const size_t off = blk * kBlock, len = std::min(kBlock, n - off);
    load(pred.data, pred.dtype, off, len, v);
    const float* t = target.as<float>() + off;
    double s = 0.0;
    for (size_t i = 0; i < len; ++i) {
      const float d = v[i] - t[i];
      s += double(d) * d;
      v[i] = d * gmul;
    }
    part[blk] = s;
    if (dpred.data) store(v, dpred.data, dpred.dtype, off, len);
  }
  for (double s : part) *loss_sum += s;
}

int32_t find_nonfinite(const void* grads, DType dtype, const std::vector<TensorSpan>& spans, size_t begin,
                       size_t end) {
  const std::vector<Chunk> work = chunks_of(spans, begin, end);
  int32_t first = std::numeric_limits<int32_t>::max();
#pragma omp parallel for schedule(static) reduction(min : first) if (work.size() >= 4)
  for (size_t i = 0; i < work.size(); ++i)
    if (span_has_nonfinite(grads, dtype, work[i].begin, work[i].end)) first = std::min(first, work[i].tensor);
  return first == std::numeric_limits<int32_t>::max() ? 0 : first + 1;
}

int32_t unscale_check(const void* grads, DType dtype, const std::vector<TensorSpan>& spans, float scale,
                      float* out32, double* norm_sq) {
  // PyTorch: inv_scale = scale.double().reciprocal().float(); grads are multiplied in FP32.
  const float inv = float(1.0 / double(scale));
  size_t total = 0;
  for (const auto& s : spans) total = std::max(total, s.offset + s.count);
  const std::vector<Chunk> work = chunks_of(spans, 0, total);
  std::vector<double> part(work.size(), 0.0);
  int32_t first = std::numeric_limits<int32_t>::max();
#pragma omp parallel for schedule(static) reduction(min : first) if (work.size() >= 4)
  for (size_t i = 0; i < work.size(); ++i) {
    const Chunk& ch = work[i];
    double s = 0.0;
    const bool bad = unscale_block<true>(grads, dtype, ch.begin, ch.end - ch.begin, inv, out32 ? out32 + ch.begin : nullptr, &s);
    part[i] = s;
    if (bad) first = std::min(first, ch.tensor);
  }
  if (norm_sq) {
    double s = 0.0;
    for (double p : part) s += p;
    *norm_sq = s;
  }
  return first == std::numeric_limits<int32_t>::max() ? 0 : first + 1;
}

void unscale(const void* grads, DType dtype, size_t n, float scale, float* out32) {
  const float inv = float(1.0 / double(scale));  // as unscale_check
  constexpr size_t kBlock = 1 << 14;
  const size_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks >= 4)
  for (size_t b = 0; b < blocks; ++b) {
    const size_t begin = b * kBlock, len = std::min(kBlock, n - begin);
    unscale_block<false>(grads, dtype, begin, len, inv, out32 + begin, nullptr);
  }
}

std::vector<GradStats> grad_stats(const void* grads, DType dtype, const std::vector<TensorSpan>& spans) {
  std::vector<GradStats> out(spans.size());
  for (size_t t = 0; t < spans.size(); ++t) {
    size_t zeros = 0, subs = 0;
    float mx = 0.0f;
    const size_t b = spans[t].offset, e = b + spans[t].count;
    for (size_t i = b; i < e; ++i) {
      float v;
      if (dtype == DType::F32) {
        v = static_cast<const float*>(grads)[i];
        const uint32_t bits = f32_bits(v) & 0x7fffffffu;
        zeros += bits == 0;
        subs += bits != 0 && bits < 0x00800000u;
      } else {
        const uint16_t x = static_cast<const uint16_t*>(grads)[i] & 0x7fffu;
        const uint16_t min_normal = dtype == DType::F16 ? 0x0400u : 0x0080u;
        zeros += x == 0;
        subs += x != 0 && x < min_normal;
        v = dtype == DType::F16 ? half_bits_to_float(x) : bf16_bits_to_float(x);
      }
      v = std::fabs(v);
      if (v > mx || v != v) mx = v;
    }
    const double n = double(std::max<size_t>(1, spans[t].count));
    out[t] = GradStats{double(zeros) / n, double(subs) / n, mx};
  }
  return out;
}

double sum_squares(const float* x, size_t n) {
  const size_t nb = n_blocks(n);
  std::vector<double> part(nb, 0.0);
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (size_t blk = 0; blk < nb; ++blk) {
    const size_t off = blk * kBlock, len = std::min(kBlock, n - off);
    double s = 0.0;
    for (size_t i = 0; i < len; ++i) s += double(x[off + i]) * x[off + i];
    part[blk] = s;
  }
  double s = 0.0;
  for (double p : part) s += p;
  return s;
}

namespace {
// The per-element rules of optimizer.h over one block, on restrict pointers so the loops vectorize.
void adamw_block(const OptimizerParams& p_in, const StepScalars& s_in, float* __restrict w, const float* __restrict g,
                 float* __restrict m, float* __restrict v, size_t len) {
  const OptimizerParams p = p_in;  // local copies: loads that cannot alias the arrays
  const StepScalars s = s_in;
  constexpr size_t kLine = 16;  // floats per cache line: the four streams asked for ahead (prefetch.h)
  for (size_t i0 = 0; i0 < len; i0 += kLine) {
    prefetch_ahead(w + i0), prefetch_ahead(g + i0), prefetch_ahead(m + i0), prefetch_ahead(v + i0);
    const size_t e = std::min(len, i0 + kLine);
    for (size_t i = i0; i < e; ++i) adamw_update(w[i], g[i], m[i], v[i], p, s);
  }
}
void sgd_block(const OptimizerParams& p_in, const StepScalars& s_in, float* __restrict w, const float* __restrict g,
               float* __restrict mom, size_t len) {
  const OptimizerParams p = p_in;
  const StepScalars s = s_in;
  for (size_t i = 0; i < len; ++i) sgd_update(w[i], g[i], mom[i], p, s);
}
void sgd_plain_block(const OptimizerParams& p_in, const StepScalars& s_in, float* __restrict w,
                     const float* __restrict g, size_t len) {
  const OptimizerParams p = p_in;
  const StepScalars s = s_in;
  for (size_t i = 0; i < len; ++i) {
    float unused = 0.0f;
    sgd_update(w[i], g[i], unused, p, s);
  }
}
}  // namespace

void optimizer_step(const OptimizerParams& p, const StepScalars& s, float* master, const float* g32,
                    float* state1, float* state2, size_t n, void* lp, DType lp_dtype) {
  const size_t nb = n_blocks(n);
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (size_t blk = 0; blk < nb; ++blk) {
    const size_t off = blk * kBlock, len = std::min(kBlock, n - off);
    if (p.kind == OptimizerKind::AdamW) adamw_block(p, s, master + off, g32 + off, state1 + off, state2 + off, len);
    else if (state1) sgd_block(p, s, master + off, g32 + off, state1 + off, len);
    else sgd_plain_block(p, s, master + off, g32 + off, len);
    if (lp) store(master + off, lp, lp_dtype, off, len);
  }
}

}  // namespace amp::cpu
