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

template <typename L, typename G>
__global__ void __launch_bounds__(kThreads) softmax_xent_kernel(const L* logits,
                                                                const int32_t* __restrict__ labels,
                                                                const float* __restrict__ scale, float inv_count,
                                                                G* dlogits, size_t rows, unsigned c, size_t ld,
                                                                size_t ld_d, bool vec, bool vec_d, double* part_loss,
                                                                long long* part_hits) {
  constexpr unsigned kPack = 16 / sizeof(L);  // columns of one 16-byte load
  constexpr unsigned kStep = kPack * 32;      // columns of one warp step of the vector loops
  constexpr unsigned kAhead = 8;              // columns a lane loads before adding their terms
  constexpr unsigned kNone = 0xffffffffu;
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const size_t total_warps = size_t(gridDim.x) * kWarpsPerBlock;
  const unsigned whole = vec ? c / kStep * kStep : 0;  // columns the vector loops take
  const float gmul = *scale * inv_count;
  double loss = 0.0;
  long long hits = 0;
  for (size_t r = size_t(blockIdx.x) * kWarpsPerBlock + warp; r < rows; r += total_warps) {
    const L* row = logits + r * ld;
    // 1. The maximum, NaN ignored (the CPU's max_op). It does not depend on the order, so each lane
    //    reads kPack consecutive columns at a time where the rows are 16-byte aligned (vec).
    float lane_max = -INFINITY;
    for (unsigned j0 = lane * kPack; j0 < whole; j0 += kStep) {
      const Pack<L, kPack> pk = *reinterpret_cast<const Pack<L, kPack>*>(row + j0);
#pragma unroll
      for (unsigned u = 0; u < kPack; ++u) lane_max = fmaxf(lane_max, to_f32(pk.v[u]));
    }
    for (unsigned j = whole + lane; j < c; j += 32) lane_max = fmaxf(lane_max, to_f32(row[j]));
    const float m = rows::warp_max(lane_max);
    // 2. The specification's sum (backend/ops_args.h): lane l adds exp_f32(x_j - m) for j = l, l + 32,
    //    ... in order, kAhead loads ahead; the 32-lane sum of those is s, the CPU twin's bits. Each
    //    lane also notes its first column equal to m: the smallest of those is the CPU's arg-max
    //    (the first column of the maximum) unless x_0 is NaN, when the arg-max is 0.
    float lane_sum = 0.0f;
    unsigned first = kNone;
    const auto term = [&](float x, unsigned j) {
      lane_sum = lane_sum + tmath::exp_f32(x - m);
      if (first == kNone && x == m) first = j;
    };
    unsigned j = lane;
    for (; j + 32 * (kAhead - 1) < c; j += 32 * kAhead) {
      float x[kAhead];
#pragma unroll
      for (unsigned u = 0; u < kAhead; ++u) x[u] = to_f32(row[j + 32 * u]);
#pragma unroll
      for (unsigned u = 0; u < kAhead; ++u) term(x[u], j + 32 * u);
    }
    for (; j < c; j += 32) term(to_f32(row[j]), j);
    const float s = rows::warp_sum(lane_sum);
#pragma unroll
    for (int h = 16; h > 0; h >>= 1) first = min(first, __shfl_xor_sync(rows::kFullMask, first, h));
    const double lse = double(m) + log(double(s));
    const int32_t y = labels[r];
    const bool valid = y >= 0 && unsigned(y) < c;
    if (lane == 0) {
      const unsigned arg = to_f32(row[0]) != to_f32(row[0]) ? 0u : first;
      loss += valid ? lse - double(to_f32(row[y])) : double(NAN);
      hits += (valid && arg == unsigned(y)) ? 1 : 0;
    }
    __syncwarp();  // every lane has read the row before any lane writes (dlogits may be logits)
    if (!dlogits) continue;
    // 3. The gradient, one element at a time: kPack consecutive columns per lane where both rows are
    //    16-byte aligned with 16-bit types alike (vec_d).
    G* out = dlogits + r * ld_d;
    const unsigned label = valid ? unsigned(y) : kNone;
    const auto grad = [&](float x, unsigned j) {
      const float p = tmath::exp_f32(x - m) / s;
      return from_f32<G>((p - (j == label ? 1.0f : 0.0f)) * gmul);
    };
    const unsigned whole_d = vec_d ? whole : 0;
    for (unsigned j0 = lane * kPack; j0 < whole_d; j0 += kStep) {
      const Pack<L, kPack> pk = *reinterpret_cast<const Pack<L, kPack>*>(row + j0);
      Pack<G, kPack> g;
#pragma unroll
      for (unsigned u = 0; u < kPack; ++u) g.v[u] = grad(to_f32(pk.v[u]), j0 + u);
      *reinterpret_cast<Pack<G, kPack>*>(out + j0) = g;
    }
    for (unsigned j = whole_d + lane; j < c; j += 32) out[j] = grad(to_f32(row[j]), j);
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
  AMP_CHECK(c < size_t(INT32_MAX), "softmax_xent: ", c, " classes (the CUDA kernel takes fewer than 2^31)");
  if (rows == 0) return;
  const size_t want = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const unsigned blocks = unsigned(std::min<size_t>({want, size_t(scratch.capacity), size_t(l.max_blocks)}));
  // The dtype of a missing dlogits does not matter: use the logits' type for the (unused) pointer.
  const DType gtype = a.dlogits ? a.dlogits_type : a.logits_type;
  dispatch_float(a.logits_type, "softmax_xent", [&](auto lt) {
    dispatch_float(gtype, "softmax_xent", [&](auto gt) {
      using L = decltype(lt);
      using G = decltype(gt);
      const bool vec = aligned_to(a.logits, 16) && (size_t(a.ld_logits) * sizeof(L)) % 16 == 0;
      const bool vec_d = vec && sizeof(G) == sizeof(L) && aligned_to(a.dlogits, 16) &&
                         (size_t(a.ld_dlogits) * sizeof(G)) % 16 == 0;
      softmax_xent_kernel<L, G><<<blocks, kThreads, 0, l.stream>>>(
          static_cast<const L*>(a.logits), a.labels, a.scale, a.inv_count, static_cast<G*>(a.dlogits), rows,
          unsigned(c), size_t(a.ld_logits), size_t(a.ld_dlogits), vec, vec_d, scratch.loss, scratch.hits);
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
