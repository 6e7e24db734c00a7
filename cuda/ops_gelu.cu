// GELU with the tanh approximation, forward and backward (cuda/cuda_ops.h): the twins of
// src/backend/cpu/ops_gelu.cpp, grid-stride, 4 elements per thread.
#include "cuda/cuda_ops.h"
#include "cuda/row_kernels.cuh"

namespace amp::cuda {

using namespace rows;

namespace {

// ---------------------------------------------------------------- GELU

template <typename T>
__global__ void __launch_bounds__(kThreads) gelu_forward_kernel(const T* x, T* y, size_t n, bool vec) {
  const size_t stride = size_t(gridDim.x) * blockDim.x * kVec;
  for (size_t i = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * kVec; i < n; i += stride) {
    float v[kVec];
    load_floats<kVec>(x, i, n, vec, v);
#pragma unroll
    for (int k = 0; k < kVec; ++k) v[k] = tmath::gelu_tanh(v[k]);
    store_floats<kVec>(y, i, n, vec, v);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) gelu_backward_kernel(const T* x, const T* dy, T* dx, size_t n, bool vec) {
  const size_t stride = size_t(gridDim.x) * blockDim.x * kVec;
  for (size_t i = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * kVec; i < n; i += stride) {
    float xv[kVec], g[kVec];
    load_floats<kVec>(x, i, n, vec, xv);
    load_floats<kVec>(dy, i, n, vec, g);
#pragma unroll
    for (int k = 0; k < kVec; ++k) g[k] = g[k] * tmath::gelu_tanh_grad(xv[k]);
    store_floats<kVec>(dx, i, n, vec, g);
  }
}

}  // namespace

void CudaOps::gelu_tanh_forward(const GeluArgs& a) {
  const cudaStream_t stream = stream_;
  check_args(a);
  if (a.n == 0) return;
  const size_t n = size_t(a.n);
  const Launch l{stream, max_blocks_};
  dispatch_float(a.type, "gelu_tanh_forward", [&](auto tt) {
    using T = decltype(tt);
    const bool vec = aligned_to(a.x, sizeof(T) * kVec) && aligned_to(a.y, sizeof(T) * kVec);
    gelu_forward_kernel<T><<<blocks_for((n + kVec - 1) / kVec, kThreads, l), kThreads, 0, stream>>>(
        static_cast<const T*>(a.x), static_cast<T*>(a.y), n, vec);
    AMP_CHECK_LAUNCH("gelu_forward_kernel");
  });
}

void CudaOps::gelu_tanh_backward(const GeluBackwardArgs& a) {
  const cudaStream_t stream = stream_;
  check_args(a);
  if (a.n == 0) return;
  const size_t n = size_t(a.n);
  const Launch l{stream, max_blocks_};
  dispatch_float(a.type, "gelu_tanh_backward", [&](auto tt) {
    using T = decltype(tt);
    const bool vec = aligned_to(a.x, sizeof(T) * kVec) && aligned_to(a.dy, sizeof(T) * kVec) &&
                     aligned_to(a.dx, sizeof(T) * kVec);
    gelu_backward_kernel<T><<<blocks_for((n + kVec - 1) / kVec, kThreads, l), kThreads, 0, stream>>>(
        static_cast<const T*>(a.x), static_cast<const T*>(a.dy), static_cast<T*>(a.dx), n, vec);
    AMP_CHECK_LAUNCH("gelu_backward_kernel");
  });
}

}  // namespace amp::cuda
