// row_sum's fixed summation order (backend/ops_args.h) on the GPU, shared by row_sum
// (ops_general.cu) and the layer norm's dgamma/dbeta (ops_layernorm.cu). A block of kSumCols
// columns x kRowSumLanes row lanes sums one segment of kRowSumSegment rows: lane l adds the
// segment's rows l, l + 16, ... in increasing order from +0, each lane loading kSumAhead of its
// rows before adding them (the loads are in flight together), then segment_sum adds the lanes in
// lane order from +0. With one segment that is the result; with more, each block writes its
// segment's sums as FP32 partials [segments][cols] and fold_segments_kernel adds them in segment
// order from +0, one thread per column. Both twins' bits, no atomics; the segments give the device
// rows x columns / (512 x 16) blocks instead of columns / 16.
#pragma once

#include <cstdint>

#include "backend/ops_args.h"
#include "core/error.h"
#include "cuda/kernel_util.cuh"

namespace amp::cuda::sums {

constexpr unsigned kLanes = unsigned(kRowSumLanes);
constexpr unsigned kCols = 16;   // columns per block (32 bytes of a 16-bit row)
constexpr int kAhead = 16;       // rows a lane loads before adding them
static_assert(kLanes * kCols <= 1024, "row-sum block size");
static_assert(kRowSumSegment % (kLanes * kAhead) == 0, "a segment holds whole rounds of the loads");

// The segments the kernels walk: rows == 0 is one empty segment.
inline int64_t segment_count(int64_t rows) { return rows > 0 ? row_sum_segments(rows) : 1; }

// The grid of the segment kernels: (column tiles, segments), at most 65535 segments side by side
// (a block takes segments blockIdx.y, blockIdx.y + gridDim.y, ...).
inline dim3 segment_grid(int64_t rows, int64_t cols, const char* what) {
  const int64_t tiles = (cols + kCols - 1) / kCols, segments = segment_count(rows);
  AMP_CHECK(tiles <= int64_t(INT32_MAX), what, ": ", cols, " columns is too many");
  return dim3(unsigned(tiles), unsigned(segments < 65535 ? segments : 65535));
}

// The one-past-last row of segment g.
__device__ __forceinline__ int64_t segment_end(int64_t g, int64_t rows) {
  return (g + 1) * kRowSumSegment < rows ? (g + 1) * kRowSumSegment : rows;
}

// Lane sums v (this thread's lane threadIdx.y, column threadIdx.x) added in lane order from +0:
// the segment's sum, returned to the threads with threadIdx.y == 0. Every thread calls it.
__device__ __forceinline__ float segment_sum(float (&part)[kLanes][kCols + 1], float v) {
  part[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  float s = 0.0f;
  if (threadIdx.y == 0) {
#pragma unroll
    for (unsigned l = 0; l < kLanes; ++l) s += part[l][threadIdx.x];
  }
  return s;
}

// out[j] = round(((0 + q_0) + q_1) + ...) from partial[g * cols + j], or with accumulate
// round(float(out[j]) + that sum).
template <typename O>
__global__ void __launch_bounds__(kThreads) fold_segments_kernel(const float* __restrict__ partial,
                                                                 int64_t segments, int64_t cols, O* __restrict__ out,
                                                                 bool accumulate) {
  const int64_t col = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (col >= cols) return;
  float s = 0.0f;
  for (int64_t g = 0; g < segments; ++g) s += partial[g * cols + col];
  if (accumulate) s = to_f32(out[col]) + s;
  out[col] = from_f32<O>(s);
}

template <typename O>
void fold_segments(cudaStream_t stream, const float* partial, int64_t segments, int64_t cols, O* out,
                   bool accumulate) {
  fold_segments_kernel<O><<<unsigned((cols + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      partial, segments, cols, out, accumulate);
  AMP_CHECK_LAUNCH("fold_segments_kernel");
}

}  // namespace amp::cuda::sums
