#include "backend/cpu/no_fp_contract.h"  // first: no FMA contraction in this file

#include "backend/cpu/cpu_ops.h"

#include <omp.h>

#include "backend/cpu/row_kernels.h"
#include "backend/cpu/row_sum_order.h"
#include "backend/cpu/transformer_rows.h"
#include "core/aligned_vector.h"
#include "core/error.h"
#include "core/prefetch.h"

namespace amp::cpu {

using namespace trows;

// LayerNorm forward and backward (transformer_args.h): rows in parallel, row sums in the 32
// lanes; the backward's dgamma/dbeta by row lanes in row_sum's order, in the same pass as dx
// where whole segments of that order, or else the lanes, share the threads evenly.

void CpuOps::layernorm_forward(const LayerNormArgs& a) {
  check_args(a);
  if (a.rows == 0) return;
  const int64_t C = a.C;
  const aligned_vector<float> gamma = to_floats(a.gamma, a.type, C), beta = to_floats(a.beta, a.type, C);
  const float c_den = float(C);
  const int64_t es = int64_t(dtype_size(a.type));
  const RowKernels& kern = active_row_kernels();
  const bool bf16_rows = a.type == DType::BF16 && kern.layernorm_forward_bf16;
#pragma omp parallel if (a.rows * C >= kParallelMin && a.rows > 1)
  {
    // The elementwise loops below vectorize (no contraction in this file: each lane rounds as the
    // scalar specification); the sums are row_sum's 8-wide lanes.
    aligned_vector<float> v(static_cast<size_t>(C)), sq(static_cast<size_t>(C));
    const float* g = gamma.data();
    const float* be = beta.data();
#pragma omp for schedule(static)
    for (int64_t r = 0; r < a.rows; ++r) {
      if (r + 1 < a.rows) prefetch_row(at(a.x, a.type, (r + 1) * C), C * es);  // the next row (prefetch.h)
      if (bf16_rows) {  // the same bits from the 16-bit row (row_kernels.h)
        float st[2];
        kern.layernorm_forward_bf16(static_cast<const uint16_t*>(a.x) + r * C, g, be, a.eps,
                                    static_cast<uint16_t*>(a.y) + r * C, C, st);
        if (a.mean) a.mean[r] = st[0], a.rstd[r] = st[1];
        continue;
      }
      const float* x = row_in(a.x, a.type, r * C, C, v.data());
      const float mean = lanes_sum(x, C) / c_den;
      float* d2 = sq.data();
      for (int64_t j = 0; j < C; ++j) {
        const float d = x[j] - mean;
        d2[j] = d * d;
      }
      const float var = lanes_sum(d2, C) / c_den;
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

namespace {

// One thread's rows of the layer norm backward: row(r, ag, ab) gives dx of row r
// (transformer_args.h) and, where ag is not null, adds the row's dgamma/dbeta terms to those
// partials. BF16 rows through the row kernels where the CPU has them (row_kernels.h); otherwise as
// the forward: vectorizing elementwise loops on FP32 rows, row_sum's lanes; FP32 dx in place.
class LnBackwardRows {
 public:
  LnBackwardRows(const LayerNormBackwardArgs& a, const float* gamma)
      : a_(a), g_(gamma), c_(size_t(a.C)),
        bf16_(a.type == DType::BF16 && active_row_kernels().layernorm_backward_bf16
                  ? active_row_kernels().layernorm_backward_bf16
                  : nullptr),
        xin_(bf16_ ? 0 : c_), dyin_(xin_.size()), n_(xin_.size()), dn_(xin_.size()), prod_(xin_.size()),
        out_(xin_.size()), old_(a.accumulate_dx ? xin_.size() : 0) {}

  void row(int64_t r, float* ag, float* ab) {
    if (bf16_) {
      prefetch_next(r + 1);
      const int64_t off = r * a_.C;
      bf16_(static_cast<const uint16_t*>(a_.x) + off, static_cast<const uint16_t*>(a_.dy) + off, g_, a_.mean[r],
            a_.rstd[r], static_cast<uint16_t*>(a_.dx) + off, a_.accumulate_dx, ag, ab, a_.C);
      return;
    }
    dx(r);
    if (ag) add_param_terms(ag, ab);
  }

 private:
  void dx(int64_t r) {
    const int64_t C = a_.C;
    const float c_den = float(C);
    prefetch_next(r + 1);
    const float* x = row_in(a_.x, a_.type, r * C, C, xin_.data());
    dy_ = row_in(a_.dy, a_.type, r * C, C, dyin_.data());
    const float mean = a_.mean[r], rstd = a_.rstd[r];
    float* n = n_.data();
    float* dn = dn_.data();
    float* p = prod_.data();
#pragma GCC ivdep
    for (int64_t j = 0; j < C; ++j) {
      n[j] = tmath::ln_norm(x[j], mean, rstd);
      dn[j] = g_[j] * dy_[j];
      p[j] = dn[j] * n[j];
    }
    const float ma = lanes_sum(dn, C) / c_den;
    const float mb = lanes_sum(p, C) / c_den;
    const float* old = a_.accumulate_dx ? row_in(a_.dx, a_.type, r * C, C, old_.data()) : nullptr;
    float* dx = row_out(a_.dx, a_.type, r * C, out_.data());  // FP32: old[j] is read before dx[j] is written
    if (old) {
#pragma GCC ivdep
      for (int64_t j = 0; j < C; ++j) dx[j] = old[j] + tmath::ln_dx(dn[j], ma, n[j], mb, rstd);
    } else {
#pragma GCC ivdep
      for (int64_t j = 0; j < C; ++j) dx[j] = tmath::ln_dx(dn[j], ma, n[j], mb, rstd);
    }
    row_store(out_.data(), a_.dx, a_.type, r * C, C);
  }

  // Asks for row r's x, dy and (when accumulating) dx ahead of dx(r) (prefetch.h); r may be past
  // the last row (then nothing).
  void prefetch_next(int64_t r) const {
    if (r >= a_.rows) return;
    const int64_t C = a_.C, bytes = C * int64_t(dtype_size(a_.type));
    prefetch_row(at(a_.x, a_.type, r * C), bytes);
    prefetch_row(at(a_.dy, a_.type, r * C), bytes);
    if (a_.accumulate_dx) prefetch_row(at(a_.dx, a_.type, r * C), bytes);
  }

  // The last row's terms of dgamma and dbeta added to a lane's partials: ag += n * dy, ab += dy.
  void add_param_terms(float* ag, float* ab) const {
    const float* n = n_.data();
#pragma GCC ivdep
    for (int64_t j = 0; j < a_.C; ++j) {
      ag[j] += n[j] * dy_[j];
      ab[j] += dy_[j];
    }
  }

  const LayerNormBackwardArgs& a_;
  const float* g_;
  size_t c_;
  decltype(RowKernels::layernorm_backward_bf16) bf16_;
  aligned_vector<float> xin_, dyin_, n_, dn_, prod_, out_, old_;
  const float* dy_ = nullptr;
};

}  // namespace

void CpuOps::layernorm_backward(const LayerNormBackwardArgs& a) {
  check_args(a);
  if (a.C == 0) return;
  const int64_t C = a.C, rows = a.rows;
  const aligned_vector<float> gamma = rows > 0 ? to_floats(a.gamma, a.type, C) : aligned_vector<float>();
  // dgamma, dbeta: kRowSumLanes lane partials per segment and column, lane l adding the segment's
  // rows l, l + L, ... in increasing order (row_sum's order, row_sum_order.h), each lane's partials
  // by one thread.
  constexpr int64_t L = kRowSumLanes;
  std::lock_guard<std::mutex> lock(layernorm_.mu);
  aligned_vector<float>& pg = layernorm_.pg;
  aligned_vector<float>& pb = layernorm_.pb;
  pg.assign(row_sum_partials(rows, C), 0.0f);  // within the capacity after the first call: no allocation
  pb.assign(pg.size(), 0.0f);
  const bool parallel = rows * C >= kParallelMin && rows > 1;
  const int threads = parallel ? omp_get_max_threads() : 1;
  const int64_t segments = row_sum_segments(rows);
  if (threads == 1 || (segments % threads == 0 && rows % kRowSumSegment == 0)) {
    // One pass, whole segments per thread, each visiting its rows in increasing order (so each
    // lane adds its rows in increasing order): a thread reads contiguous rows, as the ops before
    // it split them. With the lanes split between the threads instead (below), the op ran slower
    // on 2 threads than on 1 (8.2 against 5.8 ms a step at the char shape in BF16; 5.4-5.8 ms
    // this way; docs/benchmarks.md).
#pragma omp parallel if (parallel)
    {
      LnBackwardRows rb(a, gamma.data());
#pragma omp for schedule(static)
      for (int64_t seg = 0; seg < segments; ++seg)
        for (int64_t r = seg * kRowSumSegment; r < std::min(rows, (seg + 1) * kRowSumSegment); ++r) {
          rb.row(r, row_sum_lane(pg.data(), r, C), row_sum_lane(pb.data(), r, C));
        }
    }
  } else if (rows >= L && L % threads == 0) {
    // One pass over x and dy: each thread owns a contiguous range of lanes and computes its
    // lanes' rows' dx too, visiting its rows in increasing order (each lane still adds its rows in
    // increasing order). Lane by lane, rows L apart, the reads missed the cache on every row.
#pragma omp parallel if (parallel)
    {
      LnBackwardRows rb(a, gamma.data());
      const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t l0 = L * t / nt, l1 = L * (t + 1) / nt;
      for (int64_t base = 0; base < rows; base += L)
        for (int64_t lane = l0; lane < l1 && base + lane < rows; ++lane) {
          rb.row(base + lane, row_sum_lane(pg.data(), base + lane, C), row_sum_lane(pb.data(), base + lane, C));
        }
    }
  } else if (rows > 0) {
    // Two passes where the lanes would not share the threads evenly: the partials by (column
    // tile, lane) pairs, then dx by rows. The same sums in the same order.
    const int64_t tiles = (C + kTile - 1) / kTile, items = tiles * L;
#pragma omp parallel for schedule(static) if (parallel && items > 1)
    for (int64_t w = 0; w < items; ++w) {
      const int64_t tile = w / L, lane = w % L;
      const int64_t c0 = tile * kTile, len = std::min(kTile, C - c0);
      alignas(64) float xb[kTile], db[kTile];
      for (int64_t r = lane; r < rows; r += L) {
        float* ag = row_sum_lane(pg.data(), r, C) + c0;
        float* ab = row_sum_lane(pb.data(), r, C) + c0;
        const float* xv = row_in(a.x, a.type, r * C + c0, len, xb);
        const float* dv = row_in(a.dy, a.type, r * C + c0, len, db);
        const float mean = a.mean[r], rstd = a.rstd[r];
        for (int64_t j = 0; j < len; ++j) {
          ag[j] += tmath::ln_norm(xv[j], mean, rstd) * dv[j];
          ab[j] += dv[j];
        }
      }
    }
#pragma omp parallel if (parallel)
    {
      LnBackwardRows rb(a, gamma.data());
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) rb.row(r, nullptr, nullptr);
    }
  }
  aligned_vector<float> sg(static_cast<size_t>(C)), sb(static_cast<size_t>(C));
  fold_segments(pg.data(), rows, C, sg.data());
  fold_segments(pb.data(), rows, C, sb.data());
  if (a.accumulate_dparams) {
    const aligned_vector<float> og = to_floats(a.dgamma, a.type, C), ob = to_floats(a.dbeta, a.type, C);
    for (int64_t j = 0; j < C; ++j) {
      sg[size_t(j)] = og[size_t(j)] + sg[size_t(j)];
      sb[size_t(j)] = ob[size_t(j)] + sb[size_t(j)];
    }
  }
  store(sg.data(), a.dgamma, a.type, 0, C);
  store(sb.data(), a.dbeta, a.type, 0, C);
}

}  // namespace amp::cpu
