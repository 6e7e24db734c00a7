#include "backend/cpu/no_fp_contract.h"  // first: no FMA contraction in this file

#include "backend/cpu/cpu_ops.h"

#include "backend/cpu/transformer_rows.h"
#include "core/error.h"

namespace amp::cpu {

using namespace trows;

// The causal softmax forward and backward (transformer_args.h): rows in parallel, maxima and sums
// in the 32 lanes, exp by tmath::exp_f32 (8 at a time with AVX2, the same bits).

void CpuOps::causal_softmax_forward(const CausalSoftmaxArgs& a) {
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
      const __m256 vm = _mm256_set1_ps(m);  // v - m <= 0 (m is the row's maximum) or NaN
      for (; j + 8 <= n; j += 8) _mm256_storeu_ps(v + j, exp_f32_8_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(v + j), vm)));
#endif
      for (; j < n; ++j) v[j] = tmath::exp_f32(v[j] - m);
      const float sum = lanes_sum(v, n);
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

void CpuOps::causal_softmax_backward(const CausalSoftmaxBackwardArgs& a) {
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
      const float dot = lanes_sum(prod.data(), n);
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

}  // namespace amp::cpu
