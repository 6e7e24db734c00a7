// Losses in FP32/FP64 from low-precision predictions: softmax cross-entropy (one warp per row, the
// CPU twin's lanes and FP32 arithmetic: the same gradient bits) and squared error. Each block
// writes its partial sum; one more block adds the partials in a fixed order and adds the batch
// total to the accumulators once (no atomics, so eager runs and graph replays give the same bits).
#include <algorithm>
#include <cmath>

#include "cuda/kernel_util.cuh"
#include "cuda/row_kernels.cuh"

namespace amp::cuda {

namespace {

constexpr unsigned kWarpsPerBlock = kThreads / 32;

// Arg-max with the CPU's sequential semantics (mx = v[0]; v[j] > mx moves it): a NaN in column 0
// wins, other NaNs are ignored, ties go to the smaller column. As a total order it can be reduced
// in any tree shape.
struct Best {
  float v;
  long long i;  // -1: nothing yet
};

__device__ __forceinline__ int best_class(const Best& b) {
  if (b.i < 0) return -1;
  if (b.v != b.v) return b.i == 0 ? 2 : 0;
  return 1;
}

__device__ __forceinline__ Best better(const Best& a, const Best& b) {
  const int ca = best_class(a), cb = best_class(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 1 && a.v != b.v) return a.v > b.v ? a : b;
  return a.i <= b.i ? a : b;
}

__device__ __forceinline__ Best warp_best(Best b) {
  for (int m = 16; m > 0; m >>= 1) {
    Best o;
    o.v = __shfl_xor_sync(0xffffffffu, b.v, m);
    o.i = __shfl_xor_sync(0xffffffffu, b.i, m);
    b = better(b, o);
  }
  return b;
}

template <typename L, typename G>
__global__ void __launch_bounds__(kThreads) softmax_xent_kernel(const L* logits,
                                                                const int32_t* __restrict__ labels,
                                                                const float* __restrict__ scale, float inv_count,
                                                                G* dlogits, size_t rows, size_t c, size_t ld,
                                                                size_t ld_d, bool vec, double* part_loss,
                                                                long long* part_hits) {
  constexpr int kPack = int(16 / sizeof(L));
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const size_t total_warps = size_t(gridDim.x) * kWarpsPerBlock;
  const float gmul = *scale * inv_count;
  double loss = 0.0;
  long long hits = 0;
  for (size_t r = size_t(blockIdx.x) * kWarpsPerBlock + warp; r < rows; r += total_warps) {
    const L* row = logits + r * ld;
    // The arg-max and the maximum in one pass. Neither depends on the order (better is a total
    // order; the maximum ignores NaN, as the CPU's max_op), so where the rows are 16-byte aligned
    // (vec) each lane reads kPack consecutive columns at a time, kPack * 32 columns per warp step,
    // and the columns past the last whole step one by one.
    Best best{0.0f, -1};
    float lane_max = -INFINITY;
    const auto visit = [&](float x, size_t col) {
      best = better(best, Best{x, (long long)col});
      lane_max = fmaxf(lane_max, x);
    };
    size_t j = lane;
    if (vec) {
      const size_t whole = c / (kPack * 32) * (kPack * 32);
      for (size_t j0 = lane * kPack; j0 < whole; j0 += kPack * 32) {
        const Pack<L, kPack> pk = *reinterpret_cast<const Pack<L, kPack>*>(row + j0);
#pragma unroll
        for (int u = 0; u < kPack; ++u) visit(to_f32(pk.v[u]), j0 + u);
      }
      j = whole + lane;
    }
    for (; j < c; j += 32) visit(to_f32(row[j]), j);
    best = warp_best(best);
    // The specification's softmax (backend/ops_args.h): the 32-lane maximum (NaN ignored, as the
    // CPU's max_op), the 32-lane sum of exp_f32(x - m), p = e / s, each lane taking the columns
    // lane, lane + 32, ... in order: the CPU twin's bits.
    const float m = rows::warp_max(lane_max);
    float lane_sum = 0.0f;
    for (size_t j = lane; j < c; j += 32) lane_sum = lane_sum + tmath::exp_f32(to_f32(row[j]) - m);
    const float s = rows::warp_sum(lane_sum);
    const double lse = double(m) + log(double(s));
    const int32_t y = labels[r];
    const bool valid = y >= 0 && size_t(y) < c;
    if (lane == 0) {
      loss += valid ? lse - double(to_f32(row[y])) : double(NAN);
      hits += (valid && best.i == (long long)y) ? 1 : 0;
    }
    __syncwarp();  // every lane has read the row before any lane writes (dlogits may be logits)
    if (dlogits) {
      G* out = dlogits + r * ld_d;
      for (size_t j = lane; j < c; j += 32) {
        const float p = tmath::exp_f32(to_f32(row[j]) - m) / s;
        out[j] = from_f32<G>((p - (valid && j == size_t(y) ? 1.0f : 0.0f)) * gmul);
      }
    }
  }
  __shared__ double sl[kWarpsPerBlock];
  __shared__ long long sh[kWarpsPerBlock];
  if (lane == 0) {
    sl[warp] = loss;
    sh[warp] = hits;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0.0;
    long long h = 0;
    for (unsigned w = 0; w < kWarpsPerBlock; ++w) {
      s += sl[w];
      h += sh[w];
    }
    part_loss[blockIdx.x] = s;
    part_hits[blockIdx.x] = h;
  }
}

template <typename P, typename G>
__global__ void __launch_bounds__(kThreads) mse_kernel(const P* pred, const float* __restrict__ target,
                                                       const float* __restrict__ scale, float inv_count,
                                                       G* dpred, size_t n, double* part_loss) {
  __shared__ double sh[kThreads];
  const float gmul = 2.0f * *scale * inv_count;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  double s = 0.0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float d = to_f32(pred[i]) - target[i];
    s += double(d) * d;
    if (dpred) dpred[i] = from_f32<G>(d * gmul);
  }
  s = block_sum(s, sh);
  if (threadIdx.x == 0) part_loss[blockIdx.x] = s;
}

// One block: adds the partials in a fixed order, then the totals to the accumulators.
__global__ void __launch_bounds__(kThreads) loss_finish_kernel(const double* part_loss, const long long* part_hits,
                                                               unsigned n, float* loss_sum, int32_t* correct) {
  __shared__ double sd[kThreads];
  __shared__ long long sh[kThreads];
  double s = 0.0;
  long long h = 0;
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) {
    s += part_loss[i];
    if (part_hits) h += part_hits[i];
  }
  s = block_sum(s, sd);
  h = block_sum(h, sh);
  if (threadIdx.x == 0) {
    *loss_sum += float(s);
    if (correct) *correct += int32_t(h);
  }
}

}  // namespace

void softmax_xent(const Launch& l, const SoftmaxXentArgs& a, const LossScratch& scratch) {
  check_args(a);
  const size_t rows = size_t(a.rows), c = size_t(a.classes);
  if (rows == 0) return;
  const size_t want = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const unsigned blocks = unsigned(std::min<size_t>({want, size_t(scratch.capacity), size_t(l.max_blocks)}));
  // The dtype of a missing dlogits does not matter: use the logits' type for the (unused) pointer.
  const DType gtype = a.dlogits ? a.dlogits_type : a.logits_type;
  dispatch_float(a.logits_type, "softmax_xent", [&](auto lt) {
    dispatch_float(gtype, "softmax_xent", [&](auto gt) {
      using L = decltype(lt);
      using G = decltype(gt);
      softmax_xent_kernel<L, G><<<blocks, kThreads, 0, l.stream>>>(
          static_cast<const L*>(a.logits), a.labels, a.scale, a.inv_count, static_cast<G*>(a.dlogits), rows, c,
          size_t(a.ld_logits), size_t(a.ld_dlogits),
          aligned_to(a.logits, 16) && (size_t(a.ld_logits) * sizeof(L)) % 16 == 0, scratch.loss, scratch.hits);
      AMP_CHECK_LAUNCH("softmax_xent_kernel");
    });
  });
  loss_finish_kernel<<<1, kThreads, 0, l.stream>>>(scratch.loss, scratch.hits, blocks, a.loss_sum, a.correct);
  AMP_CHECK_LAUNCH("loss_finish_kernel");
}

void mse(const Launch& l, const Tensor& pred, const Tensor& target, const float* scale, float inv_count,
         const Tensor& dpred, float* loss_sum, const LossScratch& scratch) {
  AMP_CHECK(pred.numel() == target.numel() && target.dtype == DType::F32, "mse: bad target");
  AMP_CHECK(!dpred.data || dpred.numel() == pred.numel(), "mse: dpred shape");
  const size_t n = pred.numel();
  if (n == 0) return;
  const unsigned blocks =
      unsigned(std::min<size_t>({(n + kThreads - 1) / kThreads, size_t(scratch.capacity), size_t(l.max_blocks)}));
  const DType gtype = dpred.data ? dpred.dtype : pred.dtype;
  dispatch_float(pred.dtype, "mse", [&](auto pt) {
    dispatch_float(gtype, "mse", [&](auto gt) {
      using P = decltype(pt);
      using G = decltype(gt);
      mse_kernel<P, G><<<blocks, kThreads, 0, l.stream>>>(pred.as<const P>(), target.as<const float>(), scale,
                                                         inv_count, static_cast<G*>(dpred.data), n, scratch.loss);
      AMP_CHECK_LAUNCH("mse_kernel");
    });
  });
  loss_finish_kernel<<<1, kThreads, 0, l.stream>>>(scratch.loss, nullptr, blocks, loss_sum, nullptr);
  AMP_CHECK_LAUNCH("loss_finish_kernel");
}

}  // namespace amp::cuda
