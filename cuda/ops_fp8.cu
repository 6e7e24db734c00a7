// FP8 on the device (precision.compute fp8): the operand quantization of the linear layers
// (backend/ops_args.h, Fp8QuantizeArgs) through the scalar specification of amp/fp8_scaling.h, and
// the once-per-step scale update (fp8_update, one thread). The amax is a maximum of int32 words and
// the counts are integer sums: integer atomics combine the blocks to the same result in any order.
#include "amp/fp8_scaling.h"
#include "amp/overflow_flags.h"
#include "backend/ops_args.h"
#include "cuda/kernel_util.cuh"

namespace amp::cuda {

namespace {

// A block's amax word and flushed / saturated counts into the op's outputs (either may be null):
// integer atomics, so the result is the same in any order. Every thread of the block calls it.
__device__ void record_block(int32_t m, long long flushed, long long saturated, int64_t n, int32_t* amax,
                             unsigned long long* counts, long long* sh) {
  if (amax) {
    sh[threadIdx.x] = m;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s && sh[threadIdx.x + s] > sh[threadIdx.x]) sh[threadIdx.x] = sh[threadIdx.x + s];
      __syncthreads();
    }
    if (threadIdx.x == 0) atomicMax(amax, int32_t(sh[0]));
    __syncthreads();
  }
  if (counts) {
    const long long fl = block_sum(flushed, sh), sat = block_sum(saturated, sh);
    if (threadIdx.x == 0) {
      if (blockIdx.x == 0) atomicAdd(&counts[0], (unsigned long long)n);
      atomicAdd(&counts[1], (unsigned long long)fl);
      atomicAdd(&counts[2], (unsigned long long)sat);
    }
  }
}

template <typename S, typename D>
__global__ void __launch_bounds__(kThreads) fp8_quantize_kernel(const S* src, D* dst, int64_t n, Fp8 f,
                                                                const float* scale_p, int32_t* amax,
                                                                unsigned long long* counts) {
  __shared__ long long sh[kThreads];
  const float scale = *scale_p, inv = 1.0f / scale, fmax = fp8_max(f);
  int32_t m = 0;
  long long flushed = 0, saturated = 0;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float x = to_f32(src[i]);
    m = max(m, amax_bits(x));
    const float q = fp8_quantized(x, scale, inv, f);
    if (x - x == 0.0f) {
      flushed += (q == 0.0f && x != 0.0f);
      saturated += (fabsf(x * scale) > fmax);
    }
    dst[i] = from_f32<D>(q);
  }
  record_block(m, flushed, saturated, n, amax, counts, sh);
}

// One element's code (the specification's: saturating when finite, non-finite values kept), its
// amax word and whether it flushed or saturated, into the thread's running totals.
__device__ uint8_t cast_one(float x, float scale, float fmax, Fp8 f, int32_t* m, long long* flushed,
                            long long* saturated) {
  *m = max(*m, amax_bits(x));
  const bool finite = x - x == 0.0f;
  const uint8_t code = finite ? float_to_fp8(x * scale, f, true) : float_to_fp8(x, f, false);
  if (finite) {
    *flushed += (code & 0x7fu) == 0 && x != 0.0f;
    *saturated += fabsf(x * scale) > fmax;
  }
  return code;
}

// The codes of a rows x cols operand, one element per thread and step.
template <typename S>
__global__ void __launch_bounds__(kThreads) fp8_cast_kernel(const S* src, int64_t n, Fp8 f, const float* scale_p,
                                                            uint8_t* codes, int32_t* amax, unsigned long long* counts) {
  __shared__ long long sh[kThreads];
  const float scale = *scale_p, fmax = fp8_max(f);
  int32_t m = 0;
  long long flushed = 0, saturated = 0;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride)
    codes[e] = cast_one(to_f32(src[e]), scale, fmax, f, &m, &flushed, &saturated);
  record_block(m, flushed, saturated, n, amax, counts, sh);
}

// With the transpose: 32 x 32 tiles, read and written row by row by a warp each (the transposed
// writes go through shared memory, so both sides are coalesced); a block walks tiles.
constexpr int kTile = 32, kTileStep = int(kThreads) / kTile;
template <typename S>
__global__ void __launch_bounds__(kThreads) fp8_cast_t_kernel(const S* src, int64_t rows, int64_t cols, Fp8 f,
                                                              const float* scale_p, uint8_t* codes, uint8_t* codes_t,
                                                              int32_t* amax, unsigned long long* counts) {
  __shared__ long long sh[kThreads];
  __shared__ uint8_t tile[kTile][kTile + 1];
  const float scale = *scale_p, fmax = fp8_max(f);
  int32_t m = 0;
  long long flushed = 0, saturated = 0;
  const int tx = int(threadIdx.x) % kTile, ty = int(threadIdx.x) / kTile;
  const int64_t tiles_c = (cols + kTile - 1) / kTile, tiles = (rows + kTile - 1) / kTile * tiles_c;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t r0 = t / tiles_c * kTile, c0 = t % tiles_c * kTile;
    for (int i = ty; i < kTile; i += kTileStep) {
      const int64_t r = r0 + i, c = c0 + tx;
      if (r < rows && c < cols) {
        const uint8_t code = cast_one(to_f32(src[r * cols + c]), scale, fmax, f, &m, &flushed, &saturated);
        if (codes) codes[r * cols + c] = code;
        tile[i][tx] = code;
      }
    }
    __syncthreads();
    for (int i = ty; i < kTile; i += kTileStep) {  // codes_t[c][r] = the code at (r, c) = tile[r - r0][c - c0]
      const int64_t c = c0 + i, r = r0 + tx;
      if (r < rows && c < cols) codes_t[c * rows + r] = tile[tx][i];
    }
    __syncthreads();
  }
  record_block(m, flushed, saturated, rows * cols, amax, counts, sh);
}

__global__ void fp8_update_kernel(float* scales, const float* fmax, float* history, Fp8Meta* meta,
                                  const int32_t* amax_words, int n, Fp8Params p, const int32_t* flags,
                                  float* inv_scales, int32_t* skipped_amax) {
  fp8_update(scales, fmax, history, meta, amax_words, n, p, flags[OverflowFlags::kAny] != 0, inv_scales,
             skipped_amax);
}

}  // namespace

void fp8_quantize(const Launch& l, const Fp8QuantizeArgs& a) {
  check_args(a);
  if (a.n == 0) return;
  dispatch_float(a.src_type, "fp8_quantize", [&](auto s_tag) {
    dispatch_float(a.dst_type, "fp8_quantize", [&](auto d_tag) {
      using S = decltype(s_tag);
      using D = decltype(d_tag);
      const unsigned blocks = blocks_for(size_t(a.n), kThreads, l);
      fp8_quantize_kernel<S, D><<<blocks, kThreads, 0, l.stream>>>(
          static_cast<const S*>(a.src), static_cast<D*>(a.dst), a.n, a.format, a.scale, a.amax,
          reinterpret_cast<unsigned long long*>(a.counts));
      AMP_CHECK_LAUNCH("fp8_quantize_kernel");
    });
  });
}

void fp8_cast(const Launch& l, const Fp8CastArgs& a) {
  check_args(a);
  if (a.rows * a.cols == 0) return;
  dispatch_float(a.src_type, "fp8_cast", [&](auto s_tag) {
    using S = decltype(s_tag);
    auto* counts = reinterpret_cast<unsigned long long*>(a.counts);
    if (!a.codes_t) {
      const unsigned blocks = blocks_for(size_t(a.rows * a.cols), kThreads, l);
      fp8_cast_kernel<S><<<blocks, kThreads, 0, l.stream>>>(static_cast<const S*>(a.src), a.rows * a.cols, a.format,
                                                            a.scale, a.codes, a.amax, counts);
      AMP_CHECK_LAUNCH("fp8_cast_kernel");
      return;
    }
    const size_t tiles = size_t((a.rows + kTile - 1) / kTile) * size_t((a.cols + kTile - 1) / kTile);
    fp8_cast_t_kernel<S><<<blocks_for(tiles, 1, l), kThreads, 0, l.stream>>>(
        static_cast<const S*>(a.src), a.rows, a.cols, a.format, a.scale, a.codes, a.codes_t, a.amax, counts);
    AMP_CHECK_LAUNCH("fp8_cast_t_kernel");
  });
}

void fp8_update(const Launch& l, float* scales, const float* fmax, float* history, Fp8Meta* meta,
                const int32_t* amax_words, int n, const Fp8Params& p, const int32_t* flags, float* inv_scales,
                int32_t* skipped_amax) {
  fp8_update_kernel<<<1, 1, 0, l.stream>>>(scales, fmax, history, meta, amax_words, n, p, flags, inv_scales,
                                           skipped_amax);
  AMP_CHECK_LAUNCH("fp8_update_kernel");
}

}  // namespace amp::cuda
