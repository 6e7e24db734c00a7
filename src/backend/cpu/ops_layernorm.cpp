#include "backend/cpu/no_fp_contract.h"  // first: no FMA contraction in this file

#include "backend/cpu/cpu_ops.h"

#include "backend/cpu/transformer_rows.h"
#include "core/error.h"

namespace amp::cpu {

using namespace trows;

// LayerNorm forward and backward (transformer_args.h): rows in parallel, row sums in the 32
// lanes; the backward's dgamma/dbeta by row lanes in row_sum's order, in the same pass as dx.

void CpuOps::layernorm_forward(const LayerNormArgs& a) {
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

void CpuOps::layernorm_backward(const LayerNormBackwardArgs& a) {
  check_args(a);
  if (a.C == 0) return;
  const int64_t C = a.C, rows = a.rows;
  const float c_den = float(C);
  const std::vector<float> gamma = rows > 0 ? to_floats(a.gamma, a.type, C) : std::vector<float>();
  // One pass over x and dy: dx row by row, and dgamma, dbeta as kRowSumLanes lane partials per
  // column, lane l adding rows l, l + L, ... in increasing order (row_sum's order). The work items
  // are the lanes, so each lane's partials have one thread, whatever the thread count.
  constexpr int64_t L = kRowSumLanes;
  std::vector<float> pg(size_t(L * C), 0.0f), pb(size_t(L * C), 0.0f);
  const int64_t lanes = std::min(L, rows);
#pragma omp parallel if (rows * C >= kParallelMin && lanes > 1)
  {
    // As the forward: vectorizing elementwise loops, row_sum's lanes; FP32 dx in place.
    const size_t c = static_cast<size_t>(C);
    std::vector<float> xin(c), dyin(c), nrm(c), dnv(c), prod(c), out(c), oldin(a.accumulate_dx ? c : 0);
    const float* g = gamma.data();
#pragma omp for schedule(static)
    for (int64_t lane = 0; lane < lanes; ++lane) {
      float* ag = pg.data() + lane * C;
      float* ab = pb.data() + lane * C;
      for (int64_t r = lane; r < rows; r += L) {
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
        for (int64_t j = 0; j < C; ++j) {
          ag[j] += n[j] * dy[j];
          ab[j] += dy[j];
        }
        const float ma = lanes_sum(dn, C) / c_den;
        const float mb = lanes_sum(p, C) / c_den;
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
  std::vector<float> sg(static_cast<size_t>(C)), sb(static_cast<size_t>(C));
  for (int64_t j = 0; j < C; ++j) {
    float gs = 0.0f, bs = 0.0f;
    for (int64_t l = 0; l < L; ++l) {
      gs += pg[size_t(l * C + j)];
      bs += pb[size_t(l * C + j)];
    }
    sg[size_t(j)] = gs;
    sb[size_t(j)] = bs;
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

}  // namespace amp::cpu
