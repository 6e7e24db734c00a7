// Token + position embedding, forward and backward (cuda/cuda_ops.h): the twins of
// src/backend/cpu/ops_embedding.cpp; the backward sorts positions by token (CUB's stable radix
// sort) and sums each token's run in order, without atomics.
#include <cub/device/device_radix_sort.cuh>

#include "cuda/cuda_ops.h"
#include "cuda/row_kernels.cuh"

namespace amp::cuda {

using namespace rows;

namespace {

// ---------------------------------------------------------------- embedding

template <typename T>
__global__ void __launch_bounds__(kThreads)
    embedding_forward_kernel(const int32_t* __restrict__ tokens, const T* __restrict__ wte, const T* __restrict__ wpe,
                             T* __restrict__ x, int64_t N, int64_t T_, int64_t C, int64_t vocab) {
  const int64_t total = N * C, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const int64_t i = idx / C, c = idx % C;
    const int64_t tok = tokens[i];
    const float v = tok < 0 || tok >= vocab ? quiet_nan() : to_f32(wte[tok * C + c]) + to_f32(wpe[(i % T_) * C + c]);
    x[idx] = from_f32<T>(v);
  }
}

// Sort input: keys = tokens (out of range: vocab, sorted last), values = positions.
__global__ void __launch_bounds__(kThreads)
    embedding_keys_kernel(const int32_t* __restrict__ tokens, uint32_t* __restrict__ keys, int32_t* __restrict__ vals,
                          int64_t N, int64_t vocab) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < N; i += step) {
    const int64_t tok = tokens[i];
    keys[i] = uint32_t(tok < 0 || tok >= vocab ? vocab : tok);
    vals[i] = int32_t(i);
  }
}

// Block (i, tile): if sorted index i starts a run of a valid token, its threads sum the run's dx
// rows (positions in increasing order) for 256 columns and add the sums to dwte once.
template <typename T>
__global__ void __launch_bounds__(kEmbTile)
    embedding_dwte_kernel(const uint32_t* __restrict__ keys, const int32_t* __restrict__ pos, const T* __restrict__ dx,
                          T* __restrict__ dwte, int64_t N, int64_t C, int64_t vocab) {
  const int64_t i = blockIdx.x;
  const uint32_t tok = keys[i];
  if (int64_t(tok) >= vocab || (i > 0 && keys[i - 1] == tok)) return;
  const int64_t c = int64_t(blockIdx.y) * kEmbTile + threadIdx.x;
  if (c >= C) return;
  float acc = 0.0f;
  for (int64_t k = i; k < N && keys[k] == tok; ++k) acc += to_f32(dx[int64_t(pos[k]) * C + c]);
  T* w = dwte + int64_t(tok) * C + c;
  *w = from_f32<T>(to_f32(*w) + acc);
}

// dwpe[t][c] = sum over b of dx[b*T + t][c] (b increasing) for t < T, 0 for t in [T, max_positions).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    embedding_dwpe_kernel(const T* __restrict__ dx, T* __restrict__ dwpe, int64_t B, int64_t T_, int64_t C,
                          int64_t max_positions) {
  const int64_t total = max_positions * C, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const int64_t t = idx / C, c = idx % C;
    float acc = 0.0f;
    if (t < T_)
      for (int64_t b = 0; b < B; ++b) acc += to_f32(dx[(b * T_ + t) * C + c]);
    dwpe[idx] = from_f32<T>(acc);
  }
}

}  // namespace

size_t CudaOps::sort_temp_bytes(int64_t n, int end_bit) {
  AMP_CHECK(n >= 0 && n <= int64_t(INT32_MAX), "embedding sort: ", n, " items");
  size_t bytes = 0;
  AMP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const uint32_t*>(nullptr),
                                                 static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                 static_cast<int32_t*>(nullptr), int(n), 0, end_bit));
  return bytes;
}

void CudaOps::embedding_forward(const EmbeddingArgs& a) {
  const cudaStream_t stream = stream_;
  check_args(a);
  const int64_t N = a.B * a.T;
  if (N == 0 || a.C == 0) return;
  const Launch l{stream, max_blocks_};
  dispatch_float(a.type, "embedding_forward", [&](auto tt) {
    using T = decltype(tt);
    embedding_forward_kernel<T><<<blocks_for(size_t(N * a.C), kThreads, l), kThreads, 0, stream>>>(
        a.tokens, static_cast<const T*>(a.wte), static_cast<const T*>(a.wpe), static_cast<T*>(a.x), N, a.T, a.C,
        a.vocab);
    AMP_CHECK_LAUNCH("embedding_forward_kernel");
  });
}

void CudaOps::embedding_backward(const EmbeddingBackwardArgs& a) {
  const cudaStream_t stream = stream_;
  check_args(a);
  const int64_t N = a.B * a.T, C = a.C;
  if (C == 0) return;
  if (N > 0)
    AMP_CHECK(N <= max_tokens_ && a.vocab <= vocab_ && keys_in_.get(), "embedding_backward: B*T = ", N,
              " and vocab ", a.vocab, " exceed the reserve (", max_tokens_, " tokens, vocab ", vocab_,
              "): call reserve() first, outside any graph capture");
  const Launch l{stream, max_blocks_};
  const int64_t tiles = (C + kEmbTile - 1) / kEmbTile;
  AMP_CHECK(tiles <= 65535, "embedding_backward: C ", C, " too large");
  dispatch_float(a.type, "embedding_backward", [&](auto tt) {
    using T = decltype(tt);
    if (a.max_positions > 0) {
      embedding_dwpe_kernel<T><<<blocks_for(size_t(a.max_positions * C), kThreads, l), kThreads, 0, stream>>>(
          static_cast<const T*>(a.dx), static_cast<T*>(a.dwpe), a.B, a.T, C, a.max_positions);
      AMP_CHECK_LAUNCH("embedding_dwpe_kernel");
    }
    if (N == 0 || a.vocab == 0) return;
    embedding_keys_kernel<<<blocks_for(size_t(N), kThreads, l), kThreads, 0, stream>>>(a.tokens, keys_in_.get(),
                                                                                        vals_in_.get(), N, a.vocab);
    AMP_CHECK_LAUNCH("embedding_keys_kernel");
    size_t temp = sort_temp_.bytes();
    AMP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_temp_.get(), temp, static_cast<const uint32_t*>(keys_in_.get()),
                                                   keys_out_.get(), static_cast<const int32_t*>(vals_in_.get()),
                                                   vals_out_.get(), int(N), 0, embedding_sort_bits(a.vocab), stream));
    embedding_dwte_kernel<T><<<dim3(unsigned(N), unsigned(tiles)), kEmbTile, 0, stream>>>(
        keys_out_.get(), vals_out_.get(), static_cast<const T*>(a.dx), static_cast<T*>(a.dwte), N, C, a.vocab);
    AMP_CHECK_LAUNCH("embedding_dwte_kernel");
  });
}

}  // namespace amp::cuda
