// Kernels of the transformer ops (cuda/ops_transformer.h): the CUDA twins of
// amp::cpu::TransformerOps, element for element the same FP32 expressions (amp::tmath of
// backend/transformer_args.h) in the same reduction orders, so results are bit-identical to the
// CPU's. Row kernels run one warp per row; a warp exits or reduces as a whole (rows are per warp),
// so every __shfl_xor_sync has all 32 lanes. Tensors that may alias (in-place forms) are not
// __restrict__; each of their elements is read, then written, by the same thread.
#include <cub/device/device_radix_sort.cuh>

#include "cuda/kernel_util.cuh"
#include "cuda/ops_transformer.h"

namespace amp::cuda {

namespace {

constexpr unsigned kWarp = 32;
constexpr unsigned kRowsPerBlock = kThreads / kWarp;  // warps (rows) per block of the row kernels
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kVec = 4;
constexpr unsigned kParamLanes = unsigned(kRowSumLanes);
constexpr unsigned kEmbTile = 256;  // columns per block of the dwte kernel
static_assert(kRowLanes == int(kWarp), "row reductions are warp reductions");
static_assert(kParamLanes * 32 <= 1024, "dparams block size");

__device__ __forceinline__ float quiet_nan() { return __uint_as_float(0x7fc00000u); }

// The butterfly of transformer_args.h: lane l gets v_l + v_(l ^ h) for h = 16, 8, 4, 2, 1.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int h = kRowLanes / 2; h > 0; h /= 2) v = v + __shfl_xor_sync(kFullMask, v, h);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int h = kRowLanes / 2; h > 0; h /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, h));
  return v;
}

__device__ __forceinline__ int64_t warp_row() { return int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp; }

unsigned row_blocks(int64_t rows, const char* what) {
  const int64_t b = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  AMP_CHECK(b <= int64_t(INT32_MAX), what, ": too many rows (", rows, ")");
  return unsigned(b);
}

// ---------------------------------------------------------------- layer norm

template <typename T>
__global__ void __launch_bounds__(kThreads)
    ln_forward_kernel(const T* x, const T* __restrict__ gamma, const T* __restrict__ beta, T* y, float* mean_out,
                      float* rstd_out, int64_t rows, int64_t C, float eps) {
  const int64_t row = warp_row();
  if (row >= rows) return;
  const int lane = int(threadIdx.x % kWarp);
  const T* xr = x + row * C;
  float acc = 0.0f;
  for (int64_t j = lane; j < C; j += kWarp) acc += to_f32(xr[j]);
  const float mean = warp_sum(acc) / float(C);
  acc = 0.0f;
  for (int64_t j = lane; j < C; j += kWarp) {
    const float d = to_f32(xr[j]) - mean;
    acc += d * d;
  }
  const float var = warp_sum(acc) / float(C);
  const float rstd = tmath::ln_rstd(var, eps);
  T* yr = y + row * C;
  for (int64_t j = lane; j < C; j += kWarp)
    yr[j] = from_f32<T>(tmath::ln_out(tmath::ln_norm(to_f32(xr[j]), mean, rstd), to_f32(gamma[j]), to_f32(beta[j])));
  if (mean_out && lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    ln_backward_dx_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ gamma,
                          const float* __restrict__ mean_in, const float* __restrict__ rstd_in, T* __restrict__ dx,
                          bool accumulate, int64_t rows, int64_t C) {
  const int64_t row = warp_row();
  if (row >= rows) return;
  const int lane = int(threadIdx.x % kWarp);
  const T* dyr = dy + row * C;
  const T* xr = x + row * C;
  const float mean = mean_in[row], rstd = rstd_in[row];
  float sa = 0.0f, sb = 0.0f;
  for (int64_t j = lane; j < C; j += kWarp) {
    const float n = tmath::ln_norm(to_f32(xr[j]), mean, rstd);
    const float dn = to_f32(gamma[j]) * to_f32(dyr[j]);
    sa += dn;
    sb += dn * n;
  }
  const float a = warp_sum(sa) / float(C);
  const float b = warp_sum(sb) / float(C);
  T* dxr = dx + row * C;
  for (int64_t j = lane; j < C; j += kWarp) {
    const float n = tmath::ln_norm(to_f32(xr[j]), mean, rstd);
    const float dn = to_f32(gamma[j]) * to_f32(dyr[j]);
    float v = tmath::ln_dx(dn, a, n, b, rstd);
    if (accumulate) v = to_f32(dxr[j]) + v;
    dxr[j] = from_f32<T>(v);
  }
}

// Block = 32 columns x kParamLanes row lanes: lane l sums rows l, l + kParamLanes, ... from +0,
// then the lanes are added in lane order from +0 (row_sum's order).
template <typename T>
__global__ void __launch_bounds__(32 * kParamLanes)
    ln_backward_dparams_kernel(const T* __restrict__ dy, const T* __restrict__ x, const float* __restrict__ mean_in,
                               const float* __restrict__ rstd_in, T* __restrict__ dgamma, T* __restrict__ dbeta,
                               bool accumulate, int64_t rows, int64_t C) {
  __shared__ float pg[kParamLanes][33], pb[kParamLanes][33];
  const int64_t col = int64_t(blockIdx.x) * 32 + threadIdx.x;
  float g = 0.0f, b = 0.0f;
  if (col < C)
    for (int64_t r = threadIdx.y; r < rows; r += kParamLanes) {
      const float d = to_f32(dy[r * C + col]);
      g += tmath::ln_norm(to_f32(x[r * C + col]), mean_in[r], rstd_in[r]) * d;
      b += d;
    }
  pg[threadIdx.y][threadIdx.x] = g;
  pb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && col < C) {
    float sg = 0.0f, sb = 0.0f;
#pragma unroll
    for (unsigned l = 0; l < kParamLanes; ++l) {
      sg += pg[l][threadIdx.x];
      sb += pb[l][threadIdx.x];
    }
    if (accumulate) {
      sg = to_f32(dgamma[col]) + sg;
      sb = to_f32(dbeta[col]) + sb;
    }
    dgamma[col] = from_f32<T>(sg);
    dbeta[col] = from_f32<T>(sb);
  }
}

// ---------------------------------------------------------------- causal softmax

template <typename S, typename P>
__global__ void __launch_bounds__(kThreads)
    softmax_forward_kernel(const S* s, P* p, int64_t rows, int64_t T, float scale) {
  const int64_t row = warp_row();
  if (row >= rows) return;
  const int lane = int(threadIdx.x % kWarp);
  const int64_t n = row % T + 1;  // j <= i
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

size_t TransformerOps::sort_temp_bytes(int64_t n, int end_bit) {
  AMP_CHECK(n >= 0 && n <= int64_t(INT32_MAX), "embedding sort: ", n, " items");
  size_t bytes = 0;
  AMP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const uint32_t*>(nullptr),
                                                 static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                 static_cast<int32_t*>(nullptr), int(n), 0, end_bit));
  return bytes;
}

void TransformerOps::layernorm_forward(const LayerNormArgs& a, cudaStream_t stream) {
  check_args(a);
  if (a.rows == 0) return;
  const unsigned blocks = row_blocks(a.rows, "layernorm_forward");
  dispatch_float(a.type, "layernorm_forward", [&](auto tt) {
    using T = decltype(tt);
    ln_forward_kernel<T><<<blocks, kThreads, 0, stream>>>(
        static_cast<const T*>(a.x), static_cast<const T*>(a.gamma), static_cast<const T*>(a.beta),
        static_cast<T*>(a.y), a.mean, a.rstd, a.rows, a.C, a.eps);
    AMP_CHECK_LAUNCH("ln_forward_kernel");
  });
}

void TransformerOps::layernorm_backward(const LayerNormBackwardArgs& a, cudaStream_t stream) {
  check_args(a);
  if (a.C == 0) return;
  const int64_t tiles = (a.C + 31) / 32;
  AMP_CHECK(tiles <= int64_t(INT32_MAX), "layernorm_backward: too many columns");
  dispatch_float(a.type, "layernorm_backward", [&](auto tt) {
    using T = decltype(tt);
    ln_backward_dparams_kernel<T><<<unsigned(tiles), dim3(32, kParamLanes), 0, stream>>>(
        static_cast<const T*>(a.dy), static_cast<const T*>(a.x), a.mean, a.rstd, static_cast<T*>(a.dgamma),
        static_cast<T*>(a.dbeta), a.accumulate_dparams, a.rows, a.C);
    AMP_CHECK_LAUNCH("ln_backward_dparams_kernel");
    if (a.rows == 0) return;
    ln_backward_dx_kernel<T><<<row_blocks(a.rows, "layernorm_backward"), kThreads, 0, stream>>>(
        static_cast<const T*>(a.dy), static_cast<const T*>(a.x), static_cast<const T*>(a.gamma), a.mean, a.rstd,
        static_cast<T*>(a.dx), a.accumulate_dx, a.rows, a.C);
    AMP_CHECK_LAUNCH("ln_backward_dx_kernel");
  });
}

void TransformerOps::causal_softmax_forward(const CausalSoftmaxArgs& a, cudaStream_t stream) {
  check_args(a);
  if (a.batch == 0 || a.T == 0) return;
  const int64_t rows = a.batch * a.T;
  const unsigned blocks = row_blocks(rows, "causal_softmax_forward");
  dispatch_float(a.s_type, "causal_softmax_forward", [&](auto st) {
    dispatch_float(a.p_type, "causal_softmax_forward", [&](auto pt) {
      using S = decltype(st);
      using P = decltype(pt);
      softmax_forward_kernel<S, P><<<blocks, kThreads, 0, stream>>>(static_cast<const S*>(a.s), static_cast<P*>(a.p),
                                                                    rows, a.T, a.scale);
      AMP_CHECK_LAUNCH("softmax_forward_kernel");
    });
  });
}

void TransformerOps::causal_softmax_backward(const CausalSoftmaxBackwardArgs& a, cudaStream_t stream) {
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

void TransformerOps::gelu_tanh_forward(const GeluArgs& a, cudaStream_t stream) {
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

void TransformerOps::gelu_tanh_backward(const GeluBackwardArgs& a, cudaStream_t stream) {
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

void TransformerOps::embedding_forward(const EmbeddingArgs& a, cudaStream_t stream) {
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

void TransformerOps::embedding_backward(const EmbeddingBackwardArgs& a, cudaStream_t stream) {
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
