// The causal softmax forward and backward (cuda/cuda_ops.h): the twins of
// src/backend/cpu/ops_softmax.cpp, one warp per row.
#include "cuda/cuda_ops.h"
#include "cuda/row_kernels.cuh"

namespace amp::cuda {

using namespace rows;

namespace {

// ---------------------------------------------------------------- causal softmax

template <typename S, typename P>
__global__ void __launch_bounds__(kThreads)
    softmax_forward_kernel(const S* s, P* p, int64_t rows, int64_t T, int64_t Tq, float scale) {
  const int64_t row = warp_row();
  if (row >= rows) return;
  const int lane = int(threadIdx.x % kWarp);
  const int64_t n = T - Tq + row % Tq + 1;  // j <= i, the query's position i
  const S* sr = s + row * T;
  float m = -INFINITY;
  for (int64_t j = lane; j < n; j += kWarp) m = fmaxf(m, scale * to_f32(sr[j]));
  m = warp_max(m);
  float acc = 0.0f;
  for (int64_t j = lane; j < n; j += kWarp) acc += tmath::exp_f32(scale * to_f32(sr[j]) - m);
  const float sum = warp_sum(acc);
  P* pr = p + row * T;
  for (int64_t j = lane; j < T; j += kWarp)
    pr[j] = from_f32<P>(j < n ? tmath::exp_f32(scale * to_f32(sr[j]) - m) / sum : 0.0f);
}

template <typename P, typename DP, typename DS>
__global__ void __launch_bounds__(kThreads)
    softmax_backward_kernel(const P* __restrict__ p, const DP* dp, DS* ds, int64_t rows, int64_t T, float scale) {
  const int64_t row = warp_row();
  if (row >= rows) return;
  const int lane = int(threadIdx.x % kWarp);
  const int64_t n = row % T + 1;
  const P* pr = p + row * T;
  const DP* dpr = dp + row * T;
  float acc = 0.0f;
  for (int64_t j = lane; j < n; j += kWarp) acc += to_f32(dpr[j]) * to_f32(pr[j]);
  const float dot = warp_sum(acc);
  DS* dsr = ds + row * T;
  for (int64_t j = lane; j < T; j += kWarp)
    dsr[j] = from_f32<DS>(j < n ? tmath::softmax_ds(scale, to_f32(pr[j]), to_f32(dpr[j]), dot) : 0.0f);
}

}  // namespace

void CudaOps::causal_softmax_forward(const CausalSoftmaxArgs& a) {
  const cudaStream_t stream = stream_;
  check_args(a);
  if (a.batch == 0 || a.T == 0) return;
  const int64_t rows = a.batch * a.rows();
  const unsigned blocks = row_blocks(rows, "causal_softmax_forward");
  dispatch_float(a.s_type, "causal_softmax_forward", [&](auto st) {
    dispatch_float(a.p_type, "causal_softmax_forward", [&](auto pt) {
      using S = decltype(st);
      using P = decltype(pt);
      softmax_forward_kernel<S, P><<<blocks, kThreads, 0, stream>>>(static_cast<const S*>(a.s), static_cast<P*>(a.p),
                                                                    rows, a.T, a.rows(), a.scale);
      AMP_CHECK_LAUNCH("softmax_forward_kernel");
    });
  });
}

void CudaOps::causal_softmax_backward(const CausalSoftmaxBackwardArgs& a) {
  const cudaStream_t stream = stream_;
  check_args(a);
  if (a.batch == 0 || a.T == 0) return;
  const int64_t rows = a.batch * a.T;
  const unsigned blocks = row_blocks(rows, "causal_softmax_backward");
  dispatch_float(a.p_type, "causal_softmax_backward", [&](auto pt) {
    dispatch_float(a.dp_type, "causal_softmax_backward", [&](auto dpt) {
      dispatch_float(a.ds_type, "causal_softmax_backward", [&](auto dst) {
        using P = decltype(pt);
        using DP = decltype(dpt);
        using DS = decltype(dst);
        softmax_backward_kernel<P, DP, DS><<<blocks, kThreads, 0, stream>>>(
            static_cast<const P*>(a.p), static_cast<const DP*>(a.dp), static_cast<DS*>(a.ds), rows, a.T, a.scale);
        AMP_CHECK_LAUNCH("softmax_backward_kernel");
      });
    });
  });
}

}  // namespace amp::cuda
