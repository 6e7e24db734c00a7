// Kernels of the general ops (cuda/cuda_ops.h): add (FP32 addition, one rounding), row_sum (the
// fixed segment and lane order of backend/ops_args.h, no atomics) and the k == 0 GEMM (C = beta *
// C). Each element is computed by the same FP32 expression as on the CPU twin, so results are
// bit-identical (NaN payloads aside). Inputs and outputs of add may be the same memory, so they are
// not __restrict__.
#include "cuda/cuda_ops.h"
#include "cuda/kernel_util.cuh"
#include "cuda/row_sum_order.cuh"

namespace amp::cuda {

namespace {

constexpr int kVec = 4;

template <typename A, typename B, typename O>
__global__ void __launch_bounds__(kThreads) add_kernel(const A* a, const B* b, O* out, size_t n, bool vec,
                                                       float scale) {
  const size_t stride = size_t(gridDim.x) * blockDim.x * kVec;
  for (size_t i = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * kVec; i < n; i += stride) {
    float va[kVec], vb[kVec];
    load_floats<kVec>(a, i, n, vec, va);
    load_floats<kVec>(b, i, n, vec, vb);
#pragma unroll
    for (int k = 0; k < kVec; ++k) va[k] += vb[k];
    if (scale != 1.0f) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) va[k] *= scale;
    }
    store_floats<kVec>(out, i, n, vec, va);
  }
}

// Segments of row_sum's order (cuda/row_sum_order.cuh), kCols columns per block: q = a segment's
// sum. One segment: out = round(q). More: partial[segment][col] = q, folded afterwards.
template <typename X, typename O>
__global__ void __launch_bounds__(sums::kCols * sums::kLanes)
    row_sum_kernel(const X* __restrict__ x, O* __restrict__ out, float* __restrict__ partial, int64_t rows,
                   int64_t cols, int64_t ldx, int64_t segments) {
  using sums::kAhead;
  using sums::kLanes;
  __shared__ float part[kLanes][sums::kCols + 1];
  const int64_t col = int64_t(blockIdx.x) * sums::kCols + threadIdx.x;
  for (int64_t g = blockIdx.y; g < segments; g += gridDim.y) {
    const int64_t end = sums::segment_end(g, rows);
    float acc = 0.0f;
    if (col < cols) {
      int64_t r = g * kRowSumSegment + threadIdx.y;
      for (; r + (kAhead - 1) * int64_t(kLanes) < end; r += kAhead * int64_t(kLanes)) {
        float v[kAhead];
#pragma unroll
        for (int u = 0; u < kAhead; ++u) v[u] = to_f32(x[(r + u * int64_t(kLanes)) * ldx + col]);
#pragma unroll
        for (int u = 0; u < kAhead; ++u) acc += v[u];
      }
      for (; r < end; r += kLanes) acc += to_f32(x[r * ldx + col]);
    }
    const float q = sums::segment_sum(part, acc);
    if (threadIdx.y == 0 && col < cols) {
      if (segments == 1)
        out[col] = from_f32<O>(q);
      else
        partial[g * cols + col] = q;
    }
    __syncthreads();  // part is reused by the next segment
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) scale_c_kernel(T* c, int64_t batch, int64_t m, int64_t n, int64_t ldc,
                                                           int64_t stride_c, float beta) {
  const int64_t total = batch * m * n, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const int64_t j = idx % n, t = idx / n, i = t % m, b = t / m;
    T* p = c + b * stride_c + i * ldc + j;
    *p = from_f32<T>(beta == 0.0f ? 0.0f : beta * to_f32(*p));  // beta == 0: C not read
  }
}

}  // namespace

void CudaOps::add(const AddArgs& a) {
  const cudaStream_t stream = stream_;
  check_args(a);
  if (a.n == 0) return;
  const size_t n = size_t(a.n);
  const Launch l{stream, max_blocks_};
  dispatch_float(a.a_type, "add", [&](auto at) {
    dispatch_float(a.b_type, "add", [&](auto bt) {
      dispatch_float(a.out_type, "add", [&](auto ot) {
        using A = decltype(at);
        using B = decltype(bt);
        using O = decltype(ot);
        const bool vec = aligned_to(a.a, sizeof(A) * kVec) && aligned_to(a.b, sizeof(B) * kVec) &&
                         aligned_to(a.out, sizeof(O) * kVec);
        add_kernel<A, B, O><<<blocks_for((n + kVec - 1) / kVec, kThreads, l), kThreads, 0, stream>>>(
            static_cast<const A*>(a.a), static_cast<const B*>(a.b), static_cast<O*>(a.out), n, vec, a.scale);
        AMP_CHECK_LAUNCH("add_kernel");
      });
    });
  });
}

void CudaOps::row_sum(const RowSumArgs& r) {
  const cudaStream_t stream = stream_;
  check_args(r);
  if (r.cols == 0) return;
  const dim3 grid = sums::segment_grid(r.rows, r.cols, "row_sum");
  const int64_t segments = sums::segment_count(r.rows);
  float* partial = segments > 1 ? sum_scratch(size_t(segments) * size_t(r.cols)) : nullptr;
  dispatch_float(r.x_type, "row_sum", [&](auto xt) {
    dispatch_float(r.out_type, "row_sum", [&](auto ot) {
      using X = decltype(xt);
      using O = decltype(ot);
      row_sum_kernel<X, O><<<grid, dim3(sums::kCols, sums::kLanes), 0, stream>>>(
          static_cast<const X*>(r.x), static_cast<O*>(r.out), partial, r.rows, r.cols, r.ldx, segments);
      AMP_CHECK_LAUNCH("row_sum_kernel");
      if (partial) sums::fold_segments(stream, partial, segments, r.cols, static_cast<O*>(r.out), false);
    });
  });
}

void CudaOps::scale_c(const GemmArgs& g) {
  const cudaStream_t stream = stream_;
  const Launch l{stream, max_blocks_};
  const size_t total = size_t(g.batch * g.m * g.n);
  dispatch_float(g.c, "gemm", [&](auto ct) {
    using T = decltype(ct);
    scale_c_kernel<T><<<blocks_for(total, kThreads, l), kThreads, 0, stream>>>(static_cast<T*>(g.C), g.batch, g.m, g.n,
                                                                               g.ldc, g.stride_c, g.beta);
    AMP_CHECK_LAUNCH("scale_c_kernel");
  });
}

}  // namespace amp::cuda
