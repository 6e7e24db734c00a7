// LayerNorm forward and backward (cuda/cuda_ops.h): the CUDA twins of src/backend/cpu/ops_layernorm.cpp,
// element for element the same FP32 expressions (amp::tmath) in the same reduction orders.
#include "cuda/cuda_ops.h"
#include "cuda/row_kernels.cuh"
#include "cuda/row_sum_order.cuh"

namespace amp::cuda {

using namespace rows;

namespace {

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

// Segments of row_sum's order (cuda/row_sum_order.cuh) for dgamma's terms n_rj * dy_rj and
// dbeta's dy_rj: a lane loads kAhead of its rows (dy, x and the row's statistics) before it adds
// their terms in order. One segment: dgamma, dbeta = round(q) (or round(old + q)); more: the
// partials pg, pb [segment][col], folded afterwards.
template <typename T>
__global__ void __launch_bounds__(sums::kCols * sums::kLanes)
    ln_backward_dparams_kernel(const T* __restrict__ dy, const T* __restrict__ x, const float* __restrict__ mean_in,
                               const float* __restrict__ rstd_in, T* __restrict__ dgamma, T* __restrict__ dbeta,
                               float* __restrict__ pg, float* __restrict__ pb, bool accumulate, int64_t rows,
                               int64_t C, int64_t segments) {
  constexpr int kAhead = 8;  // four values per row: half row_sum's rows ahead
  using sums::kLanes;
  __shared__ float part[kLanes][sums::kCols + 1];
  const int64_t col = int64_t(blockIdx.x) * sums::kCols + threadIdx.x;
  for (int64_t s = blockIdx.y; s < segments; s += gridDim.y) {
    const int64_t end = sums::segment_end(s, rows);
    float g = 0.0f, b = 0.0f;
    if (col < C) {
      int64_t r = s * kRowSumSegment + threadIdx.y;
      for (; r + (kAhead - 1) * int64_t(kLanes) < end; r += kAhead * int64_t(kLanes)) {
        float d[kAhead], xv[kAhead], mu[kAhead], rs[kAhead];
#pragma unroll
        for (int u = 0; u < kAhead; ++u) {
          const int64_t ru = r + u * int64_t(kLanes);
          d[u] = to_f32(dy[ru * C + col]), xv[u] = to_f32(x[ru * C + col]), mu[u] = mean_in[ru], rs[u] = rstd_in[ru];
        }
#pragma unroll
        for (int u = 0; u < kAhead; ++u) {
          g += tmath::ln_norm(xv[u], mu[u], rs[u]) * d[u];
          b += d[u];
        }
      }
      for (; r < end; r += kLanes) {
        const float d = to_f32(dy[r * C + col]);
        g += tmath::ln_norm(to_f32(x[r * C + col]), mean_in[r], rstd_in[r]) * d;
        b += d;
      }
    }
    float sg = sums::segment_sum(part, g);
    __syncthreads();  // part is reused
    float sb = sums::segment_sum(part, b);
    if (threadIdx.y == 0 && col < C) {
      if (segments > 1) {
        pg[s * C + col] = sg;
        pb[s * C + col] = sb;
      } else {
        if (accumulate) {
          sg = to_f32(dgamma[col]) + sg;
          sb = to_f32(dbeta[col]) + sb;
        }
        dgamma[col] = from_f32<T>(sg);
        dbeta[col] = from_f32<T>(sb);
      }
    }
    __syncthreads();  // part is reused by the next segment
  }
}

}  // namespace

void CudaOps::layernorm_forward(const LayerNormArgs& a) {
  const cudaStream_t stream = stream_;
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

void CudaOps::layernorm_backward(const LayerNormBackwardArgs& a) {
  const cudaStream_t stream = stream_;
  check_args(a);
  if (a.C == 0) return;
  const dim3 grid = sums::segment_grid(a.rows, a.C, "layernorm_backward");
  const int64_t segments = sums::segment_count(a.rows);
  float* pg = segments > 1 ? sum_scratch(2 * size_t(segments) * size_t(a.C)) : nullptr;
  float* pb = pg ? pg + size_t(segments) * size_t(a.C) : nullptr;
  dispatch_float(a.type, "layernorm_backward", [&](auto tt) {
    using T = decltype(tt);
    ln_backward_dparams_kernel<T><<<grid, dim3(sums::kCols, sums::kLanes), 0, stream>>>(
        static_cast<const T*>(a.dy), static_cast<const T*>(a.x), a.mean, a.rstd, static_cast<T*>(a.dgamma),
        static_cast<T*>(a.dbeta), pg, pb, a.accumulate_dparams, a.rows, a.C, segments);
    AMP_CHECK_LAUNCH("ln_backward_dparams_kernel");
    if (pg) {
      sums::fold_segments(stream, pg, segments, a.C, static_cast<T*>(a.dgamma), a.accumulate_dparams);
      sums::fold_segments(stream, pb, segments, a.C, static_cast<T*>(a.dbeta), a.accumulate_dparams);
    }
    if (a.rows == 0) return;
    ln_backward_dx_kernel<T><<<row_blocks(a.rows, "layernorm_backward"), kThreads, 0, stream>>>(
        static_cast<const T*>(a.dy), static_cast<const T*>(a.x), static_cast<const T*>(a.gamma), a.mean, a.rstd,
        static_cast<T*>(a.dx), a.accumulate_dx, a.rows, a.C);
    AMP_CHECK_LAUNCH("ln_backward_dx_kernel");
  });
}

}  // namespace amp::cuda
