// Elementwise kernels: ReLU/GELU forward and backward (FP32 math, results rounded to each tensor's
// dtype, the CPU twins' expressions) and the bias add of the non-epilogue path (the bias gradient
// is row_sum's kernel, ops_general.cu). Inputs and outputs may be the same
// memory (the MLP's backward runs in place), so they are not __restrict__.
#include "cuda/kernel_util.cuh"

namespace amp::cuda {

namespace {

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr int kVec = 4;

__device__ __forceinline__ float act_forward(Activation a, float v) {
  if (a == Activation::Relu) return v > 0.0f ? v : (v != v ? v : 0.0f);  // NaN stays NaN
  return 0.5f * v * (1.0f + erff(v * kInvSqrt2));
}

__device__ __forceinline__ float act_backward(Activation a, float x, float g) {
  if (a == Activation::Relu) return x > 0.0f ? g : 0.0f;
  const float cdf = 0.5f * (1.0f + erff(x * kInvSqrt2));
  const float pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
  return g * (cdf + x * pdf);
}

template <typename Z, typename Y>
__global__ void __launch_bounds__(kThreads) act_forward_kernel(Activation a, const Z* z, Y* y, size_t n,
                                                               bool vec) {
  const size_t stride = size_t(gridDim.x) * blockDim.x * kVec;
  for (size_t i = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * kVec; i < n; i += stride) {
    float v[kVec];
    load_floats<kVec>(z, i, n, vec, v);
#pragma unroll
    for (int k = 0; k < kVec; ++k) v[k] = act_forward(a, v[k]);
    store_floats<kVec>(y, i, n, vec, v);
  }
}

template <typename Z, typename G, typename D>
__global__ void __launch_bounds__(kThreads) act_backward_kernel(Activation a, const Z* z, const G* dy,
                                                                D* dz, size_t n, bool vec) {
  const size_t stride = size_t(gridDim.x) * blockDim.x * kVec;
  for (size_t i = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * kVec; i < n; i += stride) {
    float x[kVec], g[kVec];
    load_floats<kVec>(z, i, n, vec, x);
    load_floats<kVec>(dy, i, n, vec, g);
#pragma unroll
    for (int k = 0; k < kVec; ++k) g[k] = act_backward(a, x[k], g[k]);
    store_floats<kVec>(dz, i, n, vec, g);
  }
}

// in and y may be the same memory (each element is read, then written, by one thread).
template <typename B, typename X, typename Y>
__global__ void __launch_bounds__(kThreads) add_bias_rows_kernel(const B* __restrict__ b, const X* in, Y* y,
                                                                 size_t rows, size_t cols) {
  const size_t n = rows * cols, stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = from_f32<Y>(to_f32(in[i]) + to_f32(b[i % cols]));
}

}  // namespace

void activation_forward(const Launch& l, Activation a, const Tensor& z, const Tensor& y) {
  AMP_CHECK(z.numel() == y.numel(), "activation_forward: size mismatch");
  const size_t n = z.numel();
  if (n == 0) return;
  dispatch_float(z.dtype, "activation_forward", [&](auto zt) {
    dispatch_float(y.dtype, "activation_forward", [&](auto yt) {
      using Z = decltype(zt);
      using Y = decltype(yt);
      const bool vec = aligned_to(z.data, sizeof(Z) * kVec) && aligned_to(y.data, sizeof(Y) * kVec);
      act_forward_kernel<Z, Y><<<blocks_for((n + kVec - 1) / kVec, kThreads, l), kThreads, 0, l.stream>>>(
          a, z.as<const Z>(), y.as<Y>(), n, vec);
      AMP_CHECK_LAUNCH("act_forward_kernel");
    });
  });
}

void activation_backward(const Launch& l, Activation a, const Tensor& z, const Tensor& dy, const Tensor& dz) {
  AMP_CHECK(z.numel() == dy.numel() && dy.numel() == dz.numel(), "activation_backward: size mismatch");
  const size_t n = z.numel();
  if (n == 0) return;
  dispatch_float(z.dtype, "activation_backward", [&](auto zt) {
    dispatch_float(dy.dtype, "activation_backward", [&](auto gt) {
      dispatch_float(dz.dtype, "activation_backward", [&](auto dt) {
        using Z = decltype(zt);
        using G = decltype(gt);
        using D = decltype(dt);
        const bool vec = aligned_to(z.data, sizeof(Z) * kVec) && aligned_to(dy.data, sizeof(G) * kVec) &&
                         aligned_to(dz.data, sizeof(D) * kVec);
        act_backward_kernel<Z, G, D><<<blocks_for((n + kVec - 1) / kVec, kThreads, l), kThreads, 0, l.stream>>>(
            a, z.as<const Z>(), dy.as<const G>(), dz.as<D>(), n, vec);
        AMP_CHECK_LAUNCH("act_backward_kernel");
      });
    });
  });
}

void add_bias_rows(const Launch& l, const Tensor& b, const Tensor& in, const Tensor& y) {
  AMP_CHECK(b.numel() == y.cols && in.rows == y.rows && in.cols == y.cols, "add_bias_rows: shapes");
  if (y.numel() == 0) return;
  dispatch_float(b.dtype, "add_bias_rows", [&](auto bt) {
    dispatch_float(in.dtype, "add_bias_rows", [&](auto xt) {
      dispatch_float(y.dtype, "add_bias_rows", [&](auto yt) {
        using B = decltype(bt);
        using X = decltype(xt);
        using Y = decltype(yt);
        add_bias_rows_kernel<B, X, Y><<<blocks_for(y.numel(), kThreads, l), kThreads, 0, l.stream>>>(
            b.as<const B>(), in.as<const X>(), y.as<Y>(), y.rows, y.cols);
        AMP_CHECK_LAUNCH("add_bias_rows_kernel");
      });
    });
  });
}

}  // namespace amp::cuda
