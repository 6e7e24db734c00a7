#include "backend/cpu/cpu_ops.h"

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "backend/cpu/float_rows.h"
#include "backend/cpu/row_sum_order.h"
#include "core/aligned_vector.h"
#include "core/convert.h"
#include "core/error.h"

namespace amp::cpu {

namespace {

using dnnl::memory;

constexpr int64_t kBlock = 2048;         // elements per work block of add (fits the L1 cache as floats)
constexpr int64_t kParallelMin = 4 * kBlock;  // fork threads only for at least this many elements
constexpr int64_t kTile = 256;           // columns per row_sum work item

memory::data_type dnnl_type(DType t) {
  switch (t) {
    case DType::F32: return memory::data_type::f32;
    case DType::BF16: return memory::data_type::bf16;
    case DType::F16: return memory::data_type::f16;
    default: break;
  }
  throw Error(ErrorKind::Internal, strcat("gemm: unsupported dtype ", dtype_name(t)));
}


// Matrices seen by oneDNN: dims {batch, rows, cols} of the LOGICAL operand (op(A) is m x k, op(B)
// is k x n, C is m x n); a transposed operand is the stored matrix read with swapped strides. A
// batch of 1 (or a stride-0 operand) has batch dimension 1, which oneDNN broadcasts.
memory::desc matrix_desc(DType t, int64_t nb, int64_t rows, int64_t cols, bool trans, int64_t ld, int64_t stride) {
  const int64_t stored_rows = trans ? cols : rows;
  if (nb == 1) stride = stored_rows * ld;  // unused by oneDNN; a non-overlapping value
  return memory::desc({nb, rows, cols}, dnnl_type(t),
                      trans ? memory::dims{stride, 1, ld} : memory::dims{stride, ld, 1});
}

int64_t batch_of(int64_t batch, int64_t stride) { return batch == 1 || stride == 0 ? 1 : batch; }

// Batch dimensions of the dense FP32 copies: oneDNN broadcasts one operand over the batch but not
// both, so when both are broadcast A is replicated (rare: every product is the same then).
std::pair<int64_t, int64_t> dense_batches(const GemmArgs& g) {
  const int64_t nba = batch_of(g.batch, g.stride_a), nbb = batch_of(g.batch, g.stride_b);
  return {nba == 1 && nbb == 1 ? g.batch : nba, nbb};
}

// Copies nb matrices of rows x cols (leading dimension ld, batch stride s, dtype t) to dense FP32.
void gather_f32(const void* src, DType t, int64_t nb, int64_t rows, int64_t cols, int64_t ld, int64_t s, float* dst) {
  const int64_t total = nb * rows;
#pragma omp parallel for schedule(static) if (total * cols >= kParallelMin && total > 1)
  for (int64_t r = 0; r < total; ++r) {
    const int64_t b = r / rows, i = r % rows;
    convert(at(src, t, b * s + i * ld), t, dst + r * cols, DType::F32, size_t(cols));
  }
}

// The reverse: dense FP32 rows rounded once into the strided destination.
void scatter_f32(const float* src, void* dst, DType t, int64_t nb, int64_t rows, int64_t cols, int64_t ld, int64_t s) {
  const int64_t total = nb * rows;
#pragma omp parallel for schedule(static) if (total * cols >= kParallelMin && total > 1)
  for (int64_t r = 0; r < total; ++r) {
    const int64_t b = r / rows, i = r % rows;
    convert(src + r * cols, DType::F32, at(dst, t, b * s + i * ld), t, size_t(cols));
  }
}

}  // namespace

struct CpuOps::GemmPlans {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  bool bf16_native = false;

  struct Plan {
    dnnl::matmul prim;
    memory::desc a, b, c;
    bool direct = false;  // on the caller's memory (else on dense FP32 scratch)
    std::string impl;
  };
  // Everything the primitive depends on; alpha is a run-time scale and not part of it.
  using Key = std::array<int64_t, 15>;
  std::map<Key, Plan> plans;
  std::mutex mu;
  aligned_vector<float> sa, sb, sc, partial;  // scratch (under mu)

  // Dense FP32 copies of A and B in sa and sb, in the stored orientation, and sc sized for C;
  // returns the copies' batch counts.
  std::pair<int64_t, int64_t> widen(const GemmArgs& g) {
    const auto [nba, nbb] = dense_batches(g);
    sa.resize(size_t(nba * g.m * g.k));
    sb.resize(size_t(nbb * g.k * g.n));
    sc.resize(size_t(g.batch * g.m * g.n));
    gather_f32(g.A, g.ab, nba, g.a_rows(), g.a_cols(), g.lda, g.stride_a, sa.data());
    gather_f32(g.B, g.ab, nbb, g.b_rows(), g.b_cols(), g.ldb, g.stride_b, sb.data());
    return {nba, nbb};
  }

  static Key key_of(const GemmArgs& g) {
    uint32_t beta_bits;
    std::memcpy(&beta_bits, &g.beta, sizeof beta_bits);
    return Key{g.m,        g.n,        g.k,        g.batch,    g.trans_a, g.trans_b, g.lda,       g.ldb,   g.ldc,
               g.stride_a, g.stride_b, g.stride_c, int64_t(g.ab), int64_t(g.c), int64_t(beta_bits)};
  }

  // False when oneDNN refuses; the reference implementation counts as a refusal
  // when `allow_ref` is false (it is orders of magnitude slower than the FP32 fallback).
  bool try_make(const memory::desc& a, const memory::desc& b, const memory::desc& c, float beta, bool allow_ref,
                Plan* out) {
    try {
      dnnl::primitive_attr attr;
      attr.set_output_scales(0, {DNNL_RUNTIME_F32_VAL});  // alpha, at run time
      if (beta != 0.0f) {
        dnnl::post_ops po;
        po.append_sum(beta);  // C = alpha * A B + beta * C, in FP32, one rounding to C's dtype
        attr.set_post_ops(po);
      }
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine);
      const std::string impl = pd.impl_info_str();
      if (!allow_ref && impl.rfind("ref", 0) == 0) return false;
      out->prim = dnnl::matmul(pd);
      out->a = a, out->b = b, out->c = c;
      out->impl = impl;
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }

  Plan& plan_for(const GemmArgs& g) {
    const Key key = key_of(g);
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;
    Plan p;
    const int64_t nba = batch_of(g.batch, g.stride_a), nbb = batch_of(g.batch, g.stride_b);
    // What oneDNN can take as it is: FP32, and BF16 where it has a BF16 matmul (C in FP32 or BF16).
    const bool ab_ok = g.ab == DType::F32 || (g.ab == DType::BF16 && bf16_native);
    const bool c_ok = g.c == DType::F32 || (g.c == DType::BF16 && g.ab == DType::BF16 && bf16_native);
    bool made = false;
    if (ab_ok && c_ok) {
      try {  // a layout oneDNN cannot describe (overlapping batches) throws here
        const memory::desc a = matrix_desc(g.ab, nba, g.m, g.k, g.trans_a, g.lda, g.stride_a);
        const memory::desc b = matrix_desc(g.ab, nbb, g.k, g.n, g.trans_b, g.ldb, g.stride_b);
        const memory::desc c = matrix_desc(g.c, g.batch, g.m, g.n, false, g.ldc, g.stride_c);
        made = try_make(a, b, c, g.beta, false, &p);
      } catch (const dnnl::error&) {
        made = false;
      }
      p.direct = made;
    }
    if (!made) {
      // Dense FP32 copies of everything, in the stored orientation (transposes stay strides).
      const auto [dba, dbb] = dense_batches(g);
      const memory::desc a = matrix_desc(DType::F32, dba, g.m, g.k, g.trans_a, g.a_cols(), g.m * g.k);
      const memory::desc b = matrix_desc(DType::F32, dbb, g.k, g.n, g.trans_b, g.b_cols(), g.k * g.n);
      const memory::desc c = matrix_desc(DType::F32, g.batch, g.m, g.n, false, g.n, g.m * g.n);
      if (!try_make(a, b, c, g.beta, true, &p))
        throw Error(ErrorKind::Internal, strcat("oneDNN has no FP32 matmul for m=", g.m, " n=", g.n, " k=", g.k,
                                                " batch=", g.batch));
      p.direct = false;
    }
    return plans.emplace(key, std::move(p)).first->second;
  }

  void execute(Plan& p, const void* a, const void* b, void* c, float alpha) {
    float scale = alpha;
    memory ma(p.a, engine, const_cast<void*>(a));
    memory mb(p.b, engine, const_cast<void*>(b));
    memory mc(p.c, engine, c);
    memory ms(memory::desc({1}, memory::data_type::f32, memory::dims{1}), engine, &scale);
    p.prim.execute(stream, {{DNNL_ARG_SRC, ma},
                            {DNNL_ARG_WEIGHTS, mb},
                            {DNNL_ARG_DST, mc},
                            {DNNL_ARG_ATTR_OUTPUT_SCALES, ms}});
    stream.wait();
  }

  // k == 0: C = beta * C (beta == 0: zeros, C not read).
  static void scale_c(const GemmArgs& g) {
    std::vector<float> row(size_t(g.n));
    for (int64_t bi = 0; bi < g.batch; ++bi)
      for (int64_t i = 0; i < g.m; ++i) {
        void* p = at(g.C, g.c, bi * g.stride_c + i * g.ldc);
        if (g.beta == 0.0f) {
          std::fill(row.begin(), row.end(), 0.0f);
        } else {
          convert(p, g.c, row.data(), DType::F32, row.size());
          for (float& v : row) v *= g.beta;
        }
        convert(row.data(), DType::F32, p, g.c, row.size());
      }
  }
};

void CpuOps::GemmPlansDeleter::operator()(GemmPlans* p) const { delete p; }

std::unique_ptr<CpuOps::GemmPlans, CpuOps::GemmPlansDeleter> CpuOps::make_gemm_plans() {
  std::unique_ptr<GemmPlans, GemmPlansDeleter> plans(new GemmPlans);
  // oneDNN runs BF16 matmuls natively only where the CPU has AVX-512 (BF16 or emulated); probe once.
  GemmPlans::Plan probe;
  const memory::desc d = matrix_desc(DType::BF16, 1, 1, 1, false, 1, 1);
  plans->bf16_native = plans->try_make(d, d, d, 0.0f, false, &probe);
  return plans;
}

namespace {
// The products the models ask for (alpha 1, beta 0, the batch's outputs apart) run on the linear
// layers' DnnlMatmul: every matrix cut into the tiles its shape gives, each tile on one thread, so
// the bits never depend on the thread count (oneDNN's own threading of a batched FP32 product gave
// 3 threads other bits than 1: the explicit attention's, end to end).
bool on_matmul(const GemmArgs& g) {
  const bool apart = g.batch == 1 || g.stride_c >= (g.m - 1) * g.ldc + g.n;
  return g.alpha == 1.0f && g.beta == 0.0f && apart;
}

// Operands oneDNN takes as they are: FP32, and BF16 where the CPU has a BF16 matmul.
bool matmul_direct(const GemmArgs& g, bool bf16_native) {
  return (g.ab == DType::F32 || (g.ab == DType::BF16 && bf16_native)) &&
         (g.c == DType::F32 || (g.c == DType::BF16 && g.ab == DType::BF16));
}

// The product DnnlMatmul runs: on the caller's matrices (direct), or on dense FP32 copies.
MatmulShape matmul_shape(const GemmArgs& g, bool direct) {
  MatmulShape s;
  s.m = size_t(g.m), s.n = size_t(g.n), s.k = size_t(g.k);
  s.trans_a = g.trans_a, s.trans_b = g.trans_b;
  if (direct) {
    s.lda = size_t(g.lda), s.ldb = size_t(g.ldb), s.ldc = size_t(g.ldc);
    s.ab = g.ab, s.c = g.c;
  } else {
    s.ab = s.c = DType::F32;  // dense: lda, ldb, ldc 0
  }
  return s;
}
}  // namespace

std::string CpuOps::gemm_implementation(const GemmArgs& g) {
  check_args(g);
  if (g.empty() || g.k == 0) return "none (no product)";
  if (on_matmul(g)) {
    std::lock_guard<std::mutex> lock(linear_mu_);
    const bool direct = matmul_direct(g, bf16_native_);
    return matmul_.implementation(matmul_shape(g, direct)) + (direct ? " (direct, " : " (widened to f32, ") +
           (g.batch > 1 ? "side by side)" : "tiled)");
  }
  std::lock_guard<std::mutex> lock(plans_->mu);
  const GemmPlans::Plan& p = plans_->plan_for(g);
  return p.impl + (p.direct ? " (direct)" : " (widened to f32)");
}

void CpuOps::gemm(const GemmArgs& g) {
  check_args(g);
  if (g.empty()) return;
  if (g.k != 0 && on_matmul(g)) {
    std::scoped_lock lock(plans_->mu, linear_mu_);  // the dense scratch, the matmul's streams
    const bool direct = matmul_direct(g, bf16_native_);
    DnnlMatmul::Batch batch;
    batch.count = size_t(g.batch);
    if (direct) {
      batch.stride_a = size_t(g.stride_a);  // 0 repeats the matrix, as in GemmArgs
      batch.stride_b = size_t(g.stride_b);
      batch.stride_c = size_t(g.stride_c);
      matmul_.run_batch(matmul_shape(g, true), batch, g.A, g.B, nullptr, g.C);
      return;
    }
    // Widen the operands to dense FP32 (exact), multiply in FP32, round C once.
    const auto [nba, nbb] = plans_->widen(g);
    batch.stride_a = nba == 1 ? 0 : size_t(g.m * g.k);
    batch.stride_b = nbb == 1 ? 0 : size_t(g.k * g.n);
    batch.stride_c = size_t(g.m * g.n);
    matmul_.run_batch(matmul_shape(g, false), batch, plans_->sa.data(), plans_->sb.data(), nullptr, plans_->sc.data());
    scatter_f32(plans_->sc.data(), g.C, g.c, g.batch, g.m, g.n, g.ldc, g.stride_c);
    return;
  }
  std::lock_guard<std::mutex> lock(plans_->mu);
  if (g.k == 0) {
    GemmPlans::scale_c(g);
    return;
  }
  GemmPlans::Plan& p = plans_->plan_for(g);
  if (p.direct) {
    plans_->execute(p, g.A, g.B, g.C, g.alpha);
    return;
  }
  // Widen (or copy) the operands to dense FP32, multiply in FP32, round C once.
  plans_->widen(g);
  auto& sc = plans_->sc;
  if (g.beta != 0.0f) gather_f32(g.C, g.c, g.batch, g.m, g.n, g.ldc, g.stride_c, sc.data());
  plans_->execute(p, plans_->sa.data(), plans_->sb.data(), sc.data(), g.alpha);
  scatter_f32(sc.data(), g.C, g.c, g.batch, g.m, g.n, g.ldc, g.stride_c);
}

void CpuOps::add(const AddArgs& a) {
  check_args(a);
  const int64_t n = a.n, nb = (n + kBlock - 1) / kBlock;
  // One 16-bit type throughout and no scale: core/convert.h's 16-bit sums, one pass with the same
  // bits (1.8-2.5x a copy through the FP32 blocks below in a BF16 GPT step).
  const bool same16 = (a.a_type == DType::BF16 || a.a_type == DType::F16) && a.b_type == a.a_type &&
                      a.out_type == a.a_type && a.scale == 1.0f;
  if (same16) {
    const auto* x = static_cast<const uint16_t*>(a.a);
    const auto* y = static_cast<const uint16_t*>(a.b);
    auto* out = static_cast<uint16_t*>(a.out);
    const auto sum = a.a_type == DType::BF16 ? bf16_sum : f16_sum;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t blk = 0; blk < nb; ++blk) {
      const int64_t off = blk * kBlock;
      sum(x + off, y + off, out + off, size_t(std::min(kBlock, n - off)));
    }
    return;
  }
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t blk = 0; blk < nb; ++blk) {
    alignas(64) float va[kBlock], vb[kBlock];
    const int64_t off = blk * kBlock, len = std::min(kBlock, n - off);
    // FP32 operands and result are used in place (no copies); others convert through va / vb.
    const float* x = row_in(a.a, a.a_type, off, len, va);
    const float* y = row_in(a.b, a.b_type, off, len, vb);
    float* out = row_out(a.out, a.out_type, off, va);
    if (a.scale == 1.0f) {
      for (int64_t i = 0; i < len; ++i) out[i] = x[i] + y[i];
    } else {
      for (int64_t i = 0; i < len; ++i) out[i] = (x[i] + y[i]) * a.scale;
    }
    row_store(va, a.out, a.out_type, off, len);
  }
}

void CpuOps::row_sum(const RowSumArgs& r) {
  check_args(r);
  if (r.cols == 0) return;
  std::lock_guard<std::mutex> lock(plans_->mu);
  // partial[g][l][j]: lane l's sum of segment g's rows l, l + L, ... of column j (the order
  // ops_args.h fixes, row_sum_order.h). A work item is a group of consecutive lanes and a range of
  // columns; it visits its rows in increasing order (each lane still adds its own rows in
  // increasing order), whole row ranges at a time. (Lane by lane, rows L apart, the reads missed
  // the cache on every row.) One lane group per thread where the lanes allow (up to L), then column
  // ranges for the threads left.
  constexpr int64_t L = kRowSumLanes;
  auto& partial = plans_->partial;
  partial.assign(row_sum_partials(r.rows, r.cols), 0.0f);
  const int64_t tiles = (r.cols + kTile - 1) / kTile;
  const bool parallel = r.rows * r.cols >= kParallelMin;
  const int64_t threads = parallel ? omp_get_max_threads() : 1;
  int64_t groups = 1;  // a power of two dividing L
  while (groups < L && groups < threads) groups *= 2;
  const int64_t ranges = std::min(tiles, (threads + groups - 1) / groups);
  const int64_t per_group = L / groups, items = groups * ranges;
#pragma omp parallel for schedule(static) if (parallel && items > 1)
  for (int64_t w = 0; w < items; ++w) {
    const int64_t l0 = (w / ranges) * per_group, range = w % ranges;
    const int64_t t0 = tiles * range / ranges, t1 = tiles * (range + 1) / ranges;
    for (int64_t base = 0; base < r.rows; base += L)
      for (int64_t lane = l0; lane < l0 + per_group && base + lane < r.rows; ++lane)
        for (int64_t tile = t0; tile < t1; ++tile) {
          const int64_t i = base + lane, c0 = tile * kTile, len = std::min(kTile, r.cols - c0);
          float* acc = row_sum_lane(partial.data(), i, r.cols) + c0;
          widen_add(at(r.x, r.x_type, i * r.ldx + c0), r.x_type, acc, size_t(len));
        }
  }
  aligned_vector<float> sum(size_t(r.cols));
  fold_segments(partial.data(), r.rows, r.cols, sum.data());
  convert(sum.data(), DType::F32, r.out, r.out_type, sum.size());
}

}  // namespace amp::cpu
