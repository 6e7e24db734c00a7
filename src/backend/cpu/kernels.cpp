#include "backend/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/convert.h"
#include "core/error.h"
#include "core/half.h"

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
  const size_t nb = n_blocks(cols);
  // Parallel over column blocks; each sums its columns over all rows in row order.
#pragma omp parallel for schedule(static) if (rows * cols >= 4 * kBlock && nb > 1)
  for (size_t blk = 0; blk < nb; ++blk) {
    alignas(64) float acc[kBlock], v[kBlock];
    const size_t c0 = blk * kBlock, len = std::min(kBlock, cols - c0);
    std::fill(acc, acc + len, 0.0f);
    for (size_t r = 0; r < rows; ++r) {
      load(dy.data, dy.dtype, r * cols + c0, len, v);
      for (size_t i = 0; i < len; ++i) acc[i] += v[i];
    }
    store(acc, db.data, db.dtype, c0, len);
  }
}

void softmax_xent(const Tensor& logits, const int32_t* labels, float scale, float inv_count,
                  const Tensor& dlogits, double* loss_sum, int64_t* correct) {
  const size_t rows = logits.rows, c = logits.cols;
  const float gmul = scale * inv_count;
  double loss = 0.0;
  int64_t hits = 0;
#pragma omp parallel for schedule(static) reduction(+ : loss, hits) if (rows * c >= 4 * kBlock)
  for (size_t r = 0; r < rows; ++r) {
    std::vector<float> v(c);
    load(logits.data, logits.dtype, r * c, c, v.data());
    size_t arg = 0;
    float mx = v[0];
    for (size_t j = 1; j < c; ++j)
      if (v[j] > mx) mx = v[j], arg = j;
    double se = 0.0;
    for (size_t j = 0; j < c; ++j) se += std::exp(double(v[j] - mx));
    const double lse = double(mx) + std::log(se);
    const int32_t y = labels[r];
    loss += lse - double(v[size_t(y)]);
    hits += (arg == size_t(y));
    if (dlogits.data) {
      for (size_t j = 0; j < c; ++j) {
        const double p = std::exp(double(v[j]) - lse);
        v[j] = float((p - (j == size_t(y) ? 1.0 : 0.0)) * gmul);
      }
      store(v.data(), dlogits.data, dlogits.dtype, r * c, c);
    }
  }
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
    float* o = out32 + ch.begin;
    const size_t len = ch.end - ch.begin;
    load(grads, dtype, ch.begin, len, o);
    uint32_t bad = 0;
    double s = 0.0;
    for (size_t j = 0; j < len; ++j) {
      const float v = o[j] * inv;
      o[j] = v;
      bad |= !(v - v == 0.0f);
      s += double(v) * v;
    }
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

void optimizer_step(const OptimizerParams& p, const StepScalars& s, float* master, const float* g32,
                    float* state1, float* state2, size_t n, void* lp, DType lp_dtype) {
  const size_t nb = n_blocks(n);
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (size_t blk = 0; blk < nb; ++blk) {
    const size_t off = blk * kBlock, len = std::min(kBlock, n - off);
    float* w = master + off;
    const float* g = g32 + off;
    if (p.kind == OptimizerKind::AdamW) {
      for (size_t i = 0; i < len; ++i) adamw_update(w[i], g[i], state1[off + i], state2[off + i], p, s);
    } else {
      float dummy = 0.0f;
      for (size_t i = 0; i < len; ++i) sgd_update(w[i], g[i], state1 ? state1[off + i] : dummy, p, s);
    }
    if (lp) store(w, lp, lp_dtype, off, len);
  }
}

}  // namespace amp::cpu
