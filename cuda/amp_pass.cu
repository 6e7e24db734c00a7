// The mixed-precision passes over the flat gradient buffer, one block per chunk of a SpanTable:
// find_nonfinite (per bucket, before the all-reduce), the fused unscale_check (unscale into FP32,
// first non-finite tensor, squared norm) and grad_stats' per-chunk counts. Reductions go through
// per-chunk partials added in chunk order by one block: the result does not depend on timing.
#include <climits>

#include "cuda/kernel_util.cuh"
#include "cuda/span_table.h"

namespace amp::cuda {

namespace {

constexpr unsigned kFinishThreads = 1024;

__device__ __forceinline__ bool nonfinite(float x) { return (f32_bits(x) & 0x7f800000u) == 0x7f800000u; }
__device__ __forceinline__ bool nonfinite(Half x) { return (x.bits & 0x7c00u) == 0x7c00u; }
__device__ __forceinline__ bool nonfinite(BFloat16 x) { return (x.bits & 0x7f80u) == 0x7f80u; }

// Zero / subnormal classification on the stored bits and the magnitude as float (grad_stats).
__device__ __forceinline__ void classify(float x, bool& zero, bool& sub, float& mag) {
  const uint32_t b = f32_bits(x) & 0x7fffffffu;
  zero = b == 0;
  sub = b != 0 && b < 0x00800000u;
  mag = f32_from_bits(b);
}
__device__ __forceinline__ void classify(Half x, bool& zero, bool& sub, float& mag) {
  const uint16_t b = x.bits & 0x7fffu;
  zero = b == 0;
  sub = b != 0 && b < 0x0400u;
  mag = half_bits_to_float(b);
}
__device__ __forceinline__ void classify(BFloat16 x, bool& zero, bool& sub, float& mag) {
  const uint16_t b = x.bits & 0x7fffu;
  zero = b == 0;
  sub = b != 0 && b < 0x0080u;
  mag = bf16_bits_to_float(b);
}

// Keeps the smallest non-zero value in *flag (0 means "none yet").
__device__ __forceinline__ void flag_min(int32_t* flag, int32_t cand) {
  int32_t old = *reinterpret_cast<volatile int32_t*>(flag);
  while (old == 0 || cand < old) {
    const int32_t prev = atomicCAS(flag, old, cand);
    if (prev == old) break;
    old = prev;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) find_nonfinite_kernel(const T* __restrict__ g,
                                                                  const Chunk* __restrict__ chunks, int32_t* flag) {
  const Chunk ch = chunks[blockIdx.x];
  int bad = 0;
  for (uint32_t k = threadIdx.x; k < ch.len; k += blockDim.x) bad |= nonfinite(g[ch.begin + k]);
  if (__syncthreads_or(bad) && threadIdx.x == 0) flag_min(flag, ch.tensor + 1);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) unscale_kernel(const T* __restrict__ g, const Chunk* __restrict__ chunks,
                                                           const float* __restrict__ scale, float* __restrict__ out32,
                                                           ChunkPartial* __restrict__ part) {
  __shared__ double sh[kThreads];
  const Chunk ch = chunks[blockIdx.x];
  // PyTorch: inv_scale = scale.double().reciprocal().float(); grads are multiplied in FP32.
  const float inv = float(1.0 / double(*scale));
  double s = 0.0;
  int bad = 0;
  for (uint32_t k = threadIdx.x; k < ch.len; k += blockDim.x) {
    const size_t i = ch.begin + k;
    const float v = to_f32(g[i]) * inv;
    if (out32) out32[i] = v;
    bad |= !(v - v == 0.0f);
    s += double(v) * v;
  }
  s = block_sum(s, sh);
  bad = __syncthreads_or(bad);
  if (threadIdx.x == 0) part[blockIdx.x] = ChunkPartial{s, bad ? ch.tensor : INT32_MAX, 0};
}

__global__ void __launch_bounds__(kFinishThreads) unscale_finish_kernel(const ChunkPartial* __restrict__ part,
                                                                        unsigned n, int32_t* flags, float* norm_sq,
                                                                        int32_t* norm_bits) {
  __shared__ double sd[kFinishThreads];
  __shared__ int32_t si[kFinishThreads];
  double s = 0.0;
  int32_t first = INT32_MAX;
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) {
    s += part[i].sum_sq;
    first = min(first, part[i].bad_tensor);
  }
  s = block_sum(s, sd);
  first = block_min(first, si);
  if (threadIdx.x == 0) {
    const int32_t f = first == INT32_MAX ? 0 : first + 1;
    flags[OverflowFlags::kReduced] = f;
    if (f) flags[OverflowFlags::kAny] = 1;
    if (norm_bits) store_norm_partial(norm_bits, s);
    else if (norm_sq) *norm_sq = float(s);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) grad_stats_kernel(const T* __restrict__ g, const Chunk* __restrict__ chunks,
                                                              ChunkStats* __restrict__ out) {
  __shared__ unsigned sz[kThreads], ss[kThreads];
  __shared__ float sm[kThreads];
  const Chunk ch = chunks[blockIdx.x];
  unsigned zeros = 0, subs = 0;
  float mx = 0.0f;
  int nan = 0;
  for (uint32_t k = threadIdx.x; k < ch.len; k += blockDim.x) {
    bool z, s;
    float m;
    classify(g[ch.begin + k], z, s, m);
    zeros += z;
    subs += s;
    if (m != m) nan = 1;
    else mx = fmaxf(mx, m);
  }
  zeros = block_sum(zeros, sz);
  subs = block_sum(subs, ss);
  sm[threadIdx.x] = mx;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sm[threadIdx.x] = fmaxf(sm[threadIdx.x], sm[threadIdx.x + s]);
    __syncthreads();
  }
  nan = __syncthreads_or(nan);
  if (threadIdx.x == 0) out[blockIdx.x] = ChunkStats{zeros, subs, nan ? f32_from_bits(0x7fc00000u) : sm[0], 0};
}

}  // namespace

void find_nonfinite(const Launch& l, const void* grads, DType dtype, const SpanTable& t, int32_t* flag) {
  if (t.size() == 0) return;
  dispatch_float(dtype, "find_nonfinite", [&](auto tag) {
    using T = decltype(tag);
    find_nonfinite_kernel<T><<<unsigned(t.size()), kThreads, 0, l.stream>>>(static_cast<const T*>(grads),
                                                                          t.chunks.get(), flag);
    AMP_CHECK_LAUNCH("find_nonfinite_kernel");
  });
}

void unscale_check(const Launch& l, const void* grads, DType dtype, const SpanTable& t, const float* scale,
                   float* out32, int32_t* flags, float* norm_sq, int32_t* norm_bits) {
  if (t.size() > 0) {
    dispatch_float(dtype, "unscale_check", [&](auto tag) {
      using T = decltype(tag);
      unscale_kernel<T><<<unsigned(t.size()), kThreads, 0, l.stream>>>(static_cast<const T*>(grads), t.chunks.get(),
                                                                     scale, out32, t.partials.get());
      AMP_CHECK_LAUNCH("unscale_kernel");
    });
  }
  unscale_finish_kernel<<<1, kFinishThreads, 0, l.stream>>>(t.partials.get(), unsigned(t.size()), flags, norm_sq,
                                                             norm_bits);
  AMP_CHECK_LAUNCH("unscale_finish_kernel");
}

template <typename T>
__global__ void __launch_bounds__(kThreads) unscale_only_kernel(const T* __restrict__ g, size_t n,
                                                                const float* __restrict__ scale, float* __restrict__ out32) {
  const float inv = float(1.0 / double(*scale));  // as unscale_kernel
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) out32[i] = to_f32(g[i]) * inv;
}

void unscale(const Launch& l, const void* grads, DType dtype, size_t n, const float* scale, float* out32) {
  if (n == 0) return;
  dispatch_float(dtype, "unscale", [&](auto tag) {
    using T = decltype(tag);
    unscale_only_kernel<T><<<blocks_for(n, kThreads, l), kThreads, 0, l.stream>>>(static_cast<const T*>(grads), n, scale,
                                                                                  out32);
    AMP_CHECK_LAUNCH("unscale_only_kernel");
  });
}

void grad_stats_chunks(const Launch& l, const void* grads, DType dtype, const SpanTable& t) {
  if (t.size() == 0) return;
  dispatch_float(dtype, "grad_stats", [&](auto tag) {
    using T = decltype(tag);
    grad_stats_kernel<T><<<unsigned(t.size()), kThreads, 0, l.stream>>>(static_cast<const T*>(grads), t.chunks.get(),
                                                                       t.stats.get());
    AMP_CHECK_LAUNCH("grad_stats_kernel");
  });
}

}  // namespace amp::cuda
