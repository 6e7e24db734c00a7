#include "backend/cpu/no_fp_contract.h"  // first: no FMA contraction in this file

#include "backend/cpu/cpu_ops.h"

#include "backend/cpu/row_kernels.h"
#include "backend/cpu/transformer_rows.h"
#include "core/aligned_vector.h"
#include "core/error.h"

namespace amp::cpu {

using namespace trows;

// The causal softmax forward and backward (transformer_args.h): rows in parallel, each through the
// widest kernels of row_kernels.h the CPU has (the scalar specification's bits), zeros above the
// diagonal.

void CpuOps::causal_softmax_forward(const CausalSoftmaxArgs& a) {
  check_args(a);
  if (a.batch == 0 || a.T == 0) return;
  const int64_t T = a.T, Tq = a.rows(), rows = a.batch * Tq;
  const RowKernels& kern = active_row_kernels();
#pragma omp parallel if (rows * T >= 2 * kParallelMin && rows > 1)
  {
    aligned_vector<float> in(static_cast<size_t>(T)), out(static_cast<size_t>(T));
#pragma omp for schedule(static)
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t n = T - Tq + row % Tq + 1;  // j <= i, the query's position i
      const float* s = row_in(a.s, a.s_type, row * T, n, in.data());
      // An FP32 output row is written in place; another type goes through `out`.
      float* v = row_out(a.p, a.p_type, row * T, out.data());
      kern.softmax_forward(s, a.scale, v, n, nullptr);
      std::fill(v + n, v + T, 0.0f);
      row_store(v, a.p, a.p_type, row * T, T);
    }
  }
}

void CpuOps::causal_softmax_backward(const CausalSoftmaxBackwardArgs& a) {
  check_args(a);
  if (a.batch == 0 || a.T == 0) return;
  const int64_t T = a.T, rows = a.batch * T;
  const RowKernels& kern = active_row_kernels();
#pragma omp parallel if (rows * T >= 2 * kParallelMin && rows > 1)
  {
    aligned_vector<float> pbuf(static_cast<size_t>(T)), dpbuf(static_cast<size_t>(T)), out(static_cast<size_t>(T));
#pragma omp for schedule(static)
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t n = row % T + 1;
      const float* p = row_in(a.p, a.p_type, row * T, n, pbuf.data());
      const float* dp = row_in(a.dp, a.dp_type, row * T, n, dpbuf.data());
      float* ds = row_out(a.ds, a.ds_type, row * T, out.data());
      kern.softmax_backward(p, dp, a.scale, ds, n);
      std::fill(ds + n, ds + T, 0.0f);
      row_store(ds, a.ds, a.ds_type, row * T, T);
    }
  }
}

}  // namespace amp::cpu
