// The scalar and AVX2 sets of row_kernels.h, and the run-time choice between them and the
// AVX-512F set. The AVX2 forms are transformer_rows.h's 8-lane functions (operation for operation
// the scalar ones) with scalar tails.
#include "backend/cpu/no_fp_contract.h"  // first: no FMA contraction in this file

#include "backend/cpu/row_kernels.h"

#include <limits>

#include "backend/cpu/transformer_rows.h"
#include "core/prefetch.h"

namespace amp::cpu {

using namespace trows;

namespace {

// ---- the scalar specification
void gelu_forward_scalar(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = tmath::gelu_tanh(x[i]);
}
void gelu_backward_scalar(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * tmath::gelu_tanh_grad(x[i]);
}

void softmax_forward_scalar(const float* s, float scale, float* v, int64_t n, float* stats) {
  for (int64_t j = 0; j < n; ++j) v[j] = scale * s[j];
  const float m = lane_reduce(n, -std::numeric_limits<float>::infinity(), [&](int64_t j) { return v[j]; }, max_op);
  for (int64_t j = 0; j < n; ++j) v[j] = tmath::exp_f32(v[j] - m);
  const float sum = lane_sum(n, [&](int64_t j) { return v[j]; });
  if (stats) stats[0] = m, stats[1] = sum;
  for (int64_t j = 0; j < n; ++j) v[j] = v[j] / sum;
}

void softmax_backward_scalar(const float* p, const float* dp, float scale, float* ds, int64_t n) {
  const float dot = lane_sum(n, [&](int64_t j) { return dp[j] * p[j]; });
  for (int64_t j = 0; j < n; ++j) ds[j] = tmath::softmax_ds(scale, p[j], dp[j], dot);
}

void exp_nonpositive_scalar(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = tmath::exp_f32(x[i]);
}

#if defined(__AVX2__)
// ---- AVX2
void gelu_forward_avx2(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    prefetch_ahead(x + i);
    _mm256_storeu_ps(y + i, gelu_tanh8(_mm256_loadu_ps(x + i)));
  }
  gelu_forward_scalar(x + i, y + i, n - i);
}
void gelu_backward_avx2(const float* x, const float* dy, float* dx, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    prefetch_ahead(x + i);
    prefetch_ahead(dy + i);
    _mm256_storeu_ps(dx + i, _mm256_mul_ps(_mm256_loadu_ps(dy + i), gelu_tanh_grad8(_mm256_loadu_ps(x + i))));
  }
  gelu_backward_scalar(x + i, dy + i, dx + i, n - i);
}

void softmax_forward_avx2(const float* s, float scale, float* v, int64_t n, float* stats) {
  int64_t j = 0;
  const __m256 vscale = _mm256_set1_ps(scale);
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(v + j, _mm256_mul_ps(vscale, _mm256_loadu_ps(s + j)));
  for (; j < n; ++j) v[j] = scale * s[j];
  const float m = row_max(v, n);
  const __m256 vm = _mm256_set1_ps(m);  // v - m <= 0 (m is the row's maximum) or NaN
  for (j = 0; j + 8 <= n; j += 8) _mm256_storeu_ps(v + j, exp_f32_8_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(v + j), vm)));
  for (; j < n; ++j) v[j] = tmath::exp_f32(v[j] - m);
  const float sum = lanes_sum(v, n);
  if (stats) stats[0] = m, stats[1] = sum;
  const __m256 vs = _mm256_set1_ps(sum);
  for (j = 0; j + 8 <= n; j += 8) _mm256_storeu_ps(v + j, _mm256_div_ps(_mm256_loadu_ps(v + j), vs));
  for (; j < n; ++j) v[j] = v[j] / sum;
}

void softmax_backward_avx2(const float* p, const float* dp, float scale, float* ds, int64_t n) {
  // dot: the lane sum of the products dp * p, each rounded (as lanes_sum of their array would add them)
  const float dot = lane_reduce_rows(
      n, 0.0f, [&](int64_t j) { return _mm256_mul_ps(_mm256_loadu_ps(dp + j), _mm256_loadu_ps(p + j)); },
      [&](int64_t j) { return dp[j] * p[j]; }, add8, add_op);
  int64_t j = 0;
  const __m256 vscale = _mm256_set1_ps(scale), vdot = _mm256_set1_ps(dot);
  for (; j + 8 <= n; j += 8)  // tmath::softmax_ds: scale * p * (dp - dot)
    _mm256_storeu_ps(ds + j, _mm256_mul_ps(_mm256_mul_ps(vscale, _mm256_loadu_ps(p + j)),
                                           _mm256_sub_ps(_mm256_loadu_ps(dp + j), vdot)));
  for (; j < n; ++j) ds[j] = tmath::softmax_ds(scale, p[j], dp[j], dot);
}

void exp_nonpositive_avx2(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp_f32_8_nonpositive(_mm256_loadu_ps(x + i)));
  exp_nonpositive_scalar(x + i, y + i, n - i);
}
#endif

}  // namespace

const std::vector<RowKernels>& available_row_kernels() {
  static const std::vector<RowKernels> ks = [] {
    std::vector<RowKernels> v{
        {"scalar", gelu_forward_scalar, gelu_backward_scalar, softmax_forward_scalar, softmax_backward_scalar,
         exp_nonpositive_scalar, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr}};
#if defined(__AVX2__)
    // __builtin_cpu_supports also checks that the OS saves the AVX / AVX-512 register state.
    if (__builtin_cpu_supports("avx2")) {
      v.push_back({"avx2", gelu_forward_avx2, gelu_backward_avx2, softmax_forward_avx2,
                   softmax_backward_avx2, exp_nonpositive_avx2, nullptr, nullptr, nullptr, nullptr, nullptr,
                   nullptr});
      if (__builtin_cpu_supports("avx512f")) v.push_back(row_kernels_avx512());
    }
#endif
    return v;
  }();
  return ks;
}

const RowKernels& active_row_kernels() { return available_row_kernels().back(); }

}  // namespace amp::cpu
