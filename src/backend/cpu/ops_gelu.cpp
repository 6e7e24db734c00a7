#include "backend/cpu/no_fp_contract.h"  // first: no FMA contraction in this file

#include "backend/cpu/cpu_ops.h"

#include "backend/cpu/gelu_kernels.h"
#include "backend/cpu/transformer_rows.h"
#include "core/error.h"

namespace amp::cpu {

using namespace trows;

// GELU with the tanh approximation, forward and backward (transformer_args.h): blocks of elements
// in parallel, each through the widest kernel of gelu_kernels.h the CPU has (the scalar
// specification's bits).

namespace {

void forward_scalar(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = tmath::gelu_tanh(x[i]);
}
void backward_scalar(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * tmath::gelu_tanh_grad(x[i]);
}

#if defined(__AVX2__)
void forward_avx2(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, gelu_tanh8(_mm256_loadu_ps(x + i)));
  forward_scalar(x + i, y + i, n - i);
}
void backward_avx2(const float* x, const float* dy, float* dx, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dx + i, _mm256_mul_ps(_mm256_loadu_ps(dy + i), gelu_tanh_grad8(_mm256_loadu_ps(x + i))));
  backward_scalar(x + i, dy + i, dx + i, n - i);
}
#endif

}  // namespace

const std::vector<GeluKernels>& available_gelu_kernels() {
  static const std::vector<GeluKernels> ks = [] {
    std::vector<GeluKernels> v{{"scalar", forward_scalar, backward_scalar}};
#if defined(__AVX2__)
    // __builtin_cpu_supports also checks that the OS saves the AVX / AVX-512 register state.
    if (__builtin_cpu_supports("avx2")) {
      v.push_back({"avx2", forward_avx2, backward_avx2});
      if (__builtin_cpu_supports("avx512f")) v.push_back({"avx512", gelu_forward_avx512, gelu_backward_avx512});
    }
#endif
    return v;
  }();
  return ks;
}
const GeluKernels& active_gelu_kernels() { return available_gelu_kernels().back(); }

void CpuOps::gelu_tanh_forward(const GeluArgs& a) {
  check_args(a);
  const GeluKernels& kern = active_gelu_kernels();
  const int64_t n = a.n, nb = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t blk = 0; blk < nb; ++blk) {
    alignas(64) float buf[kBlock];
    const int64_t off = blk * kBlock, len = std::min(kBlock, n - off);
    const float* x = row_in(a.x, a.type, off, len, buf);  // FP32: read and written in place
    kern.forward(x, row_out(a.y, a.type, off, buf), len);
    row_store(buf, a.y, a.type, off, len);
  }
}

void CpuOps::gelu_tanh_backward(const GeluBackwardArgs& a) {
  check_args(a);
  const GeluKernels& kern = active_gelu_kernels();
  const int64_t n = a.n, nb = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t blk = 0; blk < nb; ++blk) {
    alignas(64) float xbuf[kBlock], gbuf[kBlock];
    const int64_t off = blk * kBlock, len = std::min(kBlock, n - off);
    const float* x = row_in(a.x, a.type, off, len, xbuf);  // FP32: read and written in place
    const float* dy = row_in(a.dy, a.type, off, len, gbuf);
    kern.backward(x, dy, row_out(a.dx, a.type, off, gbuf), len);
    row_store(gbuf, a.dx, a.type, off, len);
  }
}

}  // namespace amp::cpu
