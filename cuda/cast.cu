// cast: f32 <-> f16 <-> bf16 on the device through the scalar conversions of core/half.h (integer
// arithmetic, so NaN payloads and subnormals come out bit-identical to the CPU paths). 16-byte
// vector loads/stores where both pointers allow.
#include "cuda/kernel_util.cuh"

namespace amp::cuda {

namespace {

template <typename S, typename D, int N>
__global__ void __launch_bounds__(kThreads) cast_kernel(const S* src, D* dst, size_t n,
                                                        bool vec) {
  const size_t stride = size_t(gridDim.x) * blockDim.x * N;
  for (size_t i = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * N; i < n; i += stride) {
    float v[N];
    load_floats<N>(src, i, n, vec, v);
    store_floats<N>(dst, i, n, vec, v);
  }
}

}  // namespace

void cast(const Launch& l, const void* src, DType src_type, void* dst, DType dst_type, size_t n) {
  if (n == 0) return;
  if (src_type == dst_type) {
    if (src != dst) AMP_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * dtype_size(src_type), cudaMemcpyDeviceToDevice, l.stream));
    return;
  }
  dispatch_float(src_type, "cast", [&](auto s_tag) {
    dispatch_float(dst_type, "cast", [&](auto d_tag) {
      using S = decltype(s_tag);
      using D = decltype(d_tag);
      constexpr int N = int(16 / (sizeof(S) > sizeof(D) ? sizeof(S) : sizeof(D)));  // one 16-byte access
      const bool vec = aligned_to(src, sizeof(S) * N) && aligned_to(dst, sizeof(D) * N);
      const unsigned blocks = blocks_for((n + N - 1) / N, kThreads, l);
      cast_kernel<S, D, N><<<blocks, kThreads, 0, l.stream>>>(static_cast<const S*>(src), static_cast<D*>(dst), n, vec);
      AMP_CHECK_LAUNCH("cast_kernel");
    });
  });
}

}  // namespace amp::cuda
