// Shared by the transformer kernels (ops_layernorm.cu, ops_softmax.cu, ops_gelu.cu,
// ops_embedding.cu): the CUDA twins of the CPU's transformer_rows.h. Row kernels run one warp per
// row; a warp exits or reduces as a whole (rows are per warp), so every __shfl_xor_sync has all 32
// lanes. Tensors that may alias (in-place forms) are not __restrict__; each of their elements is
// read, then written, by the same thread. Those files are compiled with --fmad=false, as every .cu.
#pragma once

#include <cstdint>

#include "backend/transformer_args.h"
#include "core/error.h"
#include "cuda/kernel_util.cuh"

namespace amp::cuda::rows {

constexpr unsigned kWarp = 32;
constexpr unsigned kRowsPerBlock = kThreads / kWarp;  // warps (rows) per block of the row kernels
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kVec = 4;
constexpr unsigned kEmbTile = 256;  // columns per block of the dwte kernel
static_assert(kRowLanes == int(kWarp), "row reductions are warp reductions");

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

inline unsigned row_blocks(int64_t rows, const char* what) {
  const int64_t b = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  AMP_CHECK(b <= int64_t(INT32_MAX), what, ": too many rows (", rows, ")");
  return unsigned(b);
}

}  // namespace amp::cuda::rows
