// Helpers shared by the kernels (.cu only): dtype dispatch, launch geometry, 16-byte packed loads
// and stores, and fixed-order block reductions (results do not depend on timing).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "cudart/cuda_check.h"
#include "cuda/kernels.h"

namespace amp::cuda {

constexpr unsigned kThreads = 256;  // threads per block of the elementwise and chunk kernels

// Calls f(T{}) with T the storage type of a float dtype.
template <typename F>
void dispatch_float(DType t, const char* what, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); return;
    case DType::F16: f(Half{}); return;
    case DType::BF16: f(BFloat16{}); return;
    default: break;
  }
  throw Error(ErrorKind::Internal, strcat(what, ": unsupported dtype ", dtype_name(t)));
}

// Blocks for `items` work items of `per_block` each, at most the launch's cap (grid-stride beyond).
inline unsigned blocks_for(size_t items, size_t per_block, const Launch& l) {
  const size_t b = (items + per_block - 1) / per_block;
  return unsigned(b < l.max_blocks ? (b ? b : 1) : l.max_blocks);
}

// N consecutive elements, loaded or stored as one aligned vector.
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

inline bool aligned_to(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

// Loads elements [i, i + N) of p as floats; `vec` says p is aligned to the pack and i % N == 0.
// Elements at or past n read as 0.
template <int N, typename T>
__device__ __forceinline__ void load_floats(const T* p, size_t i, size_t n, bool vec, float (&out)[N]) {
  if (vec && i + N <= n) {
    const Pack<T, N> pk = *reinterpret_cast<const Pack<T, N>*>(p + i);
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = to_f32(pk.v[k]);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = i + k < n ? to_f32(p[i + k]) : 0.0f;
  }
}

template <int N, typename T>
__device__ __forceinline__ void store_floats(T* p, size_t i, size_t n, bool vec, const float (&in)[N]) {
  if (vec && i + N <= n) {
    Pack<T, N> pk;
#pragma unroll
    for (int k = 0; k < N; ++k) pk.v[k] = from_f32<T>(in[k]);
    *reinterpret_cast<Pack<T, N>*>(p + i) = pk;
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (i + k < n) p[i + k] = from_f32<T>(in[k]);
  }
}

// Sum over the block in a fixed tree order; every thread gets the result. sh holds blockDim.x.
template <typename V>
__device__ __forceinline__ V block_sum(V v, V* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  const V r = sh[0];
  __syncthreads();
  return r;
}

// Minimum over the block; every thread gets the result.
__device__ __forceinline__ int32_t block_min(int32_t v, int32_t* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s && sh[threadIdx.x + s] < sh[threadIdx.x]) sh[threadIdx.x] = sh[threadIdx.x + s];
    __syncthreads();
  }
  const int32_t r = sh[0];
  __syncthreads();
  return r;
}

}  // namespace amp::cuda
