// The fused causal attention (backend/attention_args.h) on the device. F16 and BF16 at head
// dimension 64 go to the tensor-core kernels (cuda/attention_tc.h: not the specification's bits,
// within the rounding of P and dS to the input type) unless CudaOps::set_exact_attention(true);
// everything else runs here: the twin of src/backend/cpu/ops_attention.cpp, a direct
// transcription of the specification. One thread per output row (a query's forward and dq; a
// key's dk and dv), each walking its fixed chain with FP32 accumulators: no [T, T] matrix, no
// atomics, the CPU twin's bits (tmath::exp_f32 and explicit fmaf under --fmad=false). Two shapes
// of the same chains:
// - head dimension 64 (GPT-2's, and every shipped config's): a block of 64 threads owns 64
//   consecutive rows of one head; the thread's own rows (q and dout for a query; k, or k and v,
//   for a key) and its accumulators live in registers, the other side's rows pass through shared
//   memory a 64-row tile at a time, widened to FP32 once per block instead of once per thread. dk
//   and dv are two kernels (one kernel's k, v, dk and dv would not fit the registers). No tensor
//   cores: on an H200 the GPT-2 124M step takes 324 ms with this op, 95 ms with the tensor-core
//   kernels, 3.8 s with the per-thread kernels (docs/benchmarks.md).
// - any other head dimension: the plain per-thread kernels below, reading global memory.
#include <type_traits>

#include "cuda/attention_tc.h"
#include "cuda/cuda_ops.h"
#include "cuda/kernel_util.cuh"

namespace amp::cuda {

namespace {

constexpr int kMaxD = 1024;           // check_attention_shape's bound
constexpr unsigned kAttnThreads = 128;

struct Geometry {
  int64_t B, T, H, D;
  float scale;
};

// dot(x, y) over D terms in the specification's order: d = 0, 1, ... (F32, F16); for BF16 the
// pairs (2p, 2p + 1) in turn, the odd element first, the last element alone when D is odd.
template <typename E>
__device__ float dot(const E* x, const E* y, int64_t D) {
  float a = 0.0f;
  int64_t d = 0;
  if constexpr (std::is_same<E, BFloat16>::value)
    for (; d + 2 <= D; d += 2)
      a = __fmaf_rn(to_f32(x[d]), to_f32(y[d]), __fmaf_rn(to_f32(x[d + 1]), to_f32(y[d + 1]), a));
  for (; d < D; ++d) a = __fmaf_rn(to_f32(x[d]), to_f32(y[d]), a);
  return a;
}

// Pointers of head h of sequence b at position t: query, key, value in qkv; row of out / dout.
template <typename E>
__device__ const E* qkv_at(const E* qkv, const Geometry& g, int64_t b, int64_t h, int64_t t, int part) {
  return qkv + (b * g.T + t) * 3 * g.H * g.D + part * g.H * g.D + h * g.D;
}
template <typename E>
__device__ E* row_at(E* x, const Geometry& g, int64_t b, int64_t h, int64_t t) {
  return x + (b * g.T + t) * g.H * g.D + h * g.D;
}

template <typename E>
__global__ void __launch_bounds__(kAttnThreads)
    attention_forward_kernel(const E* qkv, E* out, float* row_max, float* row_sum, Geometry g) {
  const int64_t idx = int64_t(blockIdx.x) * kAttnThreads + threadIdx.x;  // (b*H + h)*T + i
  if (idx >= g.B * g.H * g.T) return;
  const int64_t i = idx % g.T, h = (idx / g.T) % g.H, b = idx / (g.T * g.H);
  const E* q = qkv_at(qkv, g, b, h, i, 0);
  float acc[kMaxD];
  for (int64_t d = 0; d < g.D; ++d) acc[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t j0 = 0; j0 <= i; j0 += kAttnKeyTile) {
    const int64_t j1 = j0 + kAttnKeyTile < i + 1 ? j0 + kAttnKeyTile : i + 1;
    float s[kAttnKeyTile];
    float mt = m;
    for (int64_t j = j0; j < j1; ++j) {
      s[j - j0] = g.scale * dot(q, qkv_at(qkv, g, b, h, j, 1), g.D) + 0.0f;
      if (s[j - j0] > mt || s[j - j0] != s[j - j0]) mt = s[j - j0];
    }
    const float c = tmath::exp_f32(m - mt);
    float lanes[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t j = j0; j < j1; ++j) {
      s[j - j0] = tmath::exp_f32(s[j - j0] - mt);  // p_j
      lanes[(j - j0) % 8] += s[j - j0];
    }
    l = l * c + (((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])));
    for (int64_t d = 0; d < g.D; ++d) {
      float a = acc[d] * c;
      for (int64_t j = j0; j < j1; ++j) a = __fmaf_rn(s[j - j0], to_f32(qkv_at(qkv, g, b, h, j, 2)[d]), a);
      acc[d] = a;
    }
    m = mt;
  }
  E* o = row_at(out, g, b, h, i);
  for (int64_t d = 0; d < g.D; ++d) o[d] = from_f32<E>(acc[d] / l);
  row_max[idx] = m;
  row_sum[idx] = l;
}

template <typename E>
__global__ void __launch_bounds__(kAttnThreads)
    attention_delta_kernel(const E* out, const E* dout, float* delta, Geometry g) {
  const int64_t idx = int64_t(blockIdx.x) * kAttnThreads + threadIdx.x;
  if (idx >= g.B * g.H * g.T) return;
  const int64_t i = idx % g.T, h = (idx / g.T) % g.H, b = idx / (g.T * g.H);
  delta[idx] = dot(row_at(dout, g, b, h, i), row_at(out, g, b, h, i), g.D);
}

// P_ij and dS_ij of one (query i, key j) pair (the specification's formulas).
template <typename E>
__device__ void pair(const E* qkv, const E* dout, const float* row_max, const float* row_sum, const float* delta,
                     const Geometry& g, int64_t b, int64_t h, int64_t i, int64_t j, float* p, float* ds) {
  const int64_t r = (b * g.H + h) * g.T + i;
  const float s = g.scale * dot(qkv_at(qkv, g, b, h, i, 0), qkv_at(qkv, g, b, h, j, 1), g.D) + 0.0f;
  *p = tmath::exp_f32(s - row_max[r]) / row_sum[r];
  *ds = tmath::softmax_ds(g.scale, *p, dot(row_at(dout, g, b, h, i), qkv_at(qkv, g, b, h, j, 2), g.D), delta[r]);
}

template <typename E>
__global__ void __launch_bounds__(kAttnThreads)
    attention_dq_kernel(const E* qkv, const E* dout, const float* row_max, const float* row_sum, const float* delta,
                        E* dqkv, Geometry g) {
  const int64_t idx = int64_t(blockIdx.x) * kAttnThreads + threadIdx.x;
  if (idx >= g.B * g.H * g.T) return;
  const int64_t i = idx % g.T, h = (idx / g.T) % g.H, b = idx / (g.T * g.H);
  float dq[kMaxD];
  for (int64_t d = 0; d < g.D; ++d) dq[d] = 0.0f;
  for (int64_t j = 0; j <= i; ++j) {
    float p, ds;
    pair(qkv, dout, row_max, row_sum, delta, g, b, h, i, j, &p, &ds);
    const E* k = qkv_at(qkv, g, b, h, j, 1);
    for (int64_t d = 0; d < g.D; ++d) dq[d] = __fmaf_rn(ds, to_f32(k[d]), dq[d]);
  }
  E* o = const_cast<E*>(qkv_at(static_cast<const E*>(dqkv), g, b, h, i, 0));
  for (int64_t d = 0; d < g.D; ++d) o[d] = from_f32<E>(dq[d]);
}

template <typename E>
__global__ void __launch_bounds__(kAttnThreads)
    attention_dkv_kernel(const E* qkv, const E* dout, const float* row_max, const float* row_sum, const float* delta,
                         E* dqkv, Geometry g) {
  const int64_t idx = int64_t(blockIdx.x) * kAttnThreads + threadIdx.x;  // (b*H + h)*T + j
  if (idx >= g.B * g.H * g.T) return;
  const int64_t j = idx % g.T, h = (idx / g.T) % g.H, b = idx / (g.T * g.H);
  float dk[kMaxD], dv[kMaxD];
  for (int64_t d = 0; d < g.D; ++d) dk[d] = 0.0f, dv[d] = 0.0f;
  for (int64_t i = j; i < g.T; ++i) {
    float p, ds;
    pair(qkv, dout, row_max, row_sum, delta, g, b, h, i, j, &p, &ds);
    const E* q = qkv_at(qkv, g, b, h, i, 0);
    const E* go = row_at(dout, g, b, h, i);
    for (int64_t d = 0; d < g.D; ++d) {
      dk[d] = __fmaf_rn(ds, to_f32(q[d]), dk[d]);
      dv[d] = __fmaf_rn(p, to_f32(go[d]), dv[d]);
    }
  }
  E* ok = const_cast<E*>(qkv_at(static_cast<const E*>(dqkv), g, b, h, j, 1));
  E* ov = const_cast<E*>(qkv_at(static_cast<const E*>(dqkv), g, b, h, j, 2));
  for (int64_t d = 0; d < g.D; ++d) ok[d] = from_f32<E>(dk[d]), ov[d] = from_f32<E>(dv[d]);
}

// ------------------------------------------------------------------ head dimension 64, tiled
constexpr int kTileRows = 64;  // rows per block and per shared tile
static_assert(kTileRows == kAttnKeyTile, "the forward's shared tile is the specification's key tile");

// dot(x, y) of a register row and a shared FP32 row, in the specification's order (see dot above).
template <typename E, int D>
__device__ __forceinline__ float dot_rs(const float (&x)[D], const float* y) {
  float a = 0.0f;
  if constexpr (std::is_same<E, BFloat16>::value) {
#pragma unroll
    for (int d = 0; d + 2 <= D; d += 2) a = __fmaf_rn(x[d], y[d], __fmaf_rn(x[d + 1], y[d + 1], a));
    if constexpr (D % 2 == 1) a = __fmaf_rn(x[D - 1], y[D - 1], a);
  } else {
#pragma unroll
    for (int d = 0; d < D; ++d) a = __fmaf_rn(x[d], y[d], a);
  }
  return a;
}

template <typename E, int D>
__device__ __forceinline__ void load_row(float (&x)[D], const E* src, bool valid) {
#pragma unroll
  for (int d = 0; d < D; ++d) x[d] = valid ? to_f32(src[d]) : 0.0f;
}

// Rows r0 .. r0 + 63 (those before T) of `part` (0 q, 1 k, 2 v) of qkv, or of a [rows, H*D] tensor
// (part < 0), widened into tile[64][D]; rows past T read as 0 (never used).
template <typename E, int D>
__device__ void load_tile(float (*tile)[D], const E* src, const Geometry& g, int64_t b, int64_t h, int64_t r0,
                          int part) {
  for (int e = threadIdx.x; e < kTileRows * D; e += kTileRows) {
    const int r = e / D, d = e % D;
    const int64_t t = r0 + r;
    float v = 0.0f;
    if (t < g.T) v = to_f32((part < 0 ? row_at(src, g, b, h, t) : qkv_at(src, g, b, h, t, part))[d]);
    tile[r][d] = v;
  }
}

// Block x: head (b, h) = x / tiles and row tile x % tiles (the query kernels take the longest
// tiles, the last ones, first).
struct TileIndex {
  int64_t b, h, tile;
};
__device__ TileIndex tile_index(const Geometry& g, bool longest_first) {
  const int64_t tiles = (g.T + kTileRows - 1) / kTileRows, bh = blockIdx.x / tiles, t = blockIdx.x % tiles;
  return TileIndex{bh / g.H, bh % g.H, longest_first ? tiles - 1 - t : t};
}

template <typename E, int D>
__global__ void __launch_bounds__(kTileRows)
    attention_forward_tiled(const E* qkv, E* out, float* row_max, float* row_sum, Geometry g) {
  __shared__ __align__(16) float ks[kTileRows][D];
  __shared__ __align__(16) float vs[kTileRows][D];
  __shared__ float ps[kTileRows][kTileRows];  // ps[key][thread]: the thread's scores, then p_j
  const TileIndex ti = tile_index(g, true);
  const int64_t i = ti.tile * kTileRows + threadIdx.x, last = min(g.T, (ti.tile + 1) * kTileRows) - 1;
  const bool active = i < g.T;
  float q[D], acc[D];
  load_row<E, D>(q, qkv_at(qkv, g, ti.b, ti.h, active ? i : 0, 0), active);
#pragma unroll
  for (int d = 0; d < D; ++d) acc[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t j0 = 0; j0 <= last; j0 += kTileRows) {
    __syncthreads();  // the previous tile is read by every thread
    load_tile<E, D>(ks, qkv, g, ti.b, ti.h, j0, 1);
    load_tile<E, D>(vs, qkv, g, ti.b, ti.h, j0, 2);
    __syncthreads();
    if (!active || j0 > i) continue;
    const int n = int(min(int64_t(kTileRows), i + 1 - j0));  // this query's keys in the tile
    float mt = m;
    for (int jj = 0; jj < n; ++jj) {
      const float sj = g.scale * dot_rs<E, D>(q, ks[jj]) + 0.0f;
      ps[jj][threadIdx.x] = sj;
      if (sj > mt || sj != sj) mt = sj;
    }
    const float c = tmath::exp_f32(m - mt);
    float lanes[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (int j8 = 0; j8 < n; j8 += 8) {
#pragma unroll
      for (int k = 0; k < 8; ++k)
        if (j8 + k < n) {
          const float p = tmath::exp_f32(ps[j8 + k][threadIdx.x] - mt);
          ps[j8 + k][threadIdx.x] = p;
          lanes[k] += p;
        }
    }
    l = l * c + (((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])));
#pragma unroll
    for (int d = 0; d < D; ++d) acc[d] = acc[d] * c;
    for (int jj = 0; jj < n; ++jj) {
      const float p = ps[jj][threadIdx.x];
#pragma unroll
      for (int d = 0; d < D; ++d) acc[d] = __fmaf_rn(p, vs[jj][d], acc[d]);
    }
    m = mt;
  }
  if (!active) return;
  E* o = row_at(out, g, ti.b, ti.h, i);
#pragma unroll
  for (int d = 0; d < D; ++d) o[d] = from_f32<E>(acc[d] / l);
  const int64_t r = (ti.b * g.H + ti.h) * g.T + i;
  row_max[r] = m;
  row_sum[r] = l;
}

// dq_i: the thread's query row q_i and dout_i in registers, key and value tiles in shared memory.
template <typename E, int D>
__global__ void __launch_bounds__(kTileRows)
    attention_dq_tiled(const E* qkv, const E* dout, const float* row_max, const float* row_sum, const float* delta,
                       E* dqkv, Geometry g) {
  __shared__ __align__(16) float ks[kTileRows][D];
  __shared__ __align__(16) float vs[kTileRows][D];
  const TileIndex ti = tile_index(g, true);
  const int64_t i = ti.tile * kTileRows + threadIdx.x, last = min(g.T, (ti.tile + 1) * kTileRows) - 1;
  const bool active = i < g.T;
  const int64_t r = (ti.b * g.H + ti.h) * g.T + (active ? i : 0);
  float q[D], go[D], dq[D];
  load_row<E, D>(q, qkv_at(qkv, g, ti.b, ti.h, active ? i : 0, 0), active);
  load_row<E, D>(go, row_at(dout, g, ti.b, ti.h, active ? i : 0), active);
#pragma unroll
  for (int d = 0; d < D; ++d) dq[d] = 0.0f;
  const float rm = row_max[r], rs = row_sum[r], dl = delta[r];
  for (int64_t j0 = 0; j0 <= last; j0 += kTileRows) {
    __syncthreads();
    load_tile<E, D>(ks, qkv, g, ti.b, ti.h, j0, 1);
    load_tile<E, D>(vs, qkv, g, ti.b, ti.h, j0, 2);
    __syncthreads();
    if (!active || j0 > i) continue;
    const int n = int(min(int64_t(kTileRows), i + 1 - j0));
    for (int jj = 0; jj < n; ++jj) {
      const float s = g.scale * dot_rs<E, D>(q, ks[jj]) + 0.0f;
      const float p = tmath::exp_f32(s - rm) / rs;
      const float ds = tmath::softmax_ds(g.scale, p, dot_rs<E, D>(go, vs[jj]), dl);
#pragma unroll
      for (int d = 0; d < D; ++d) dq[d] = __fmaf_rn(ds, ks[jj][d], dq[d]);
    }
  }
  if (!active) return;
  E* o = const_cast<E*>(qkv_at(static_cast<const E*>(dqkv), g, ti.b, ti.h, i, 0));
#pragma unroll
  for (int d = 0; d < D; ++d) o[d] = from_f32<E>(dq[d]);
}

// dk_j (kWantDk) or dv_j: the thread's key row k_j (and v_j for dk) in registers, query and dout
// tiles with their rows' statistics in shared memory, i = j .. T-1 in order.
template <typename E, int D, bool kWantDk>
__global__ void __launch_bounds__(kTileRows)
    attention_dkv_tiled(const E* qkv, const E* dout, const float* row_max, const float* row_sum, const float* delta,
                        E* dqkv, Geometry g) {
  __shared__ __align__(16) float qs[kTileRows][D];
  __shared__ __align__(16) float gs[kTileRows][D];
  __shared__ float stat[3][kTileRows];  // row_max, row_sum, delta of the tile's queries
  const TileIndex ti = tile_index(g, false);
  const int64_t j = ti.tile * kTileRows + threadIdx.x;
  const bool active = j < g.T;
  const int64_t head = (ti.b * g.H + ti.h) * g.T;
  float k[D], v[kWantDk ? D : 1], acc[D];
  load_row<E, D>(k, qkv_at(qkv, g, ti.b, ti.h, active ? j : 0, 1), active);
  if constexpr (kWantDk) load_row<E, D>(v, qkv_at(qkv, g, ti.b, ti.h, active ? j : 0, 2), active);
#pragma unroll
  for (int d = 0; d < D; ++d) acc[d] = 0.0f;
  for (int64_t i0 = ti.tile * kTileRows; i0 < g.T; i0 += kTileRows) {
    __syncthreads();
    load_tile<E, D>(qs, qkv, g, ti.b, ti.h, i0, 0);
    load_tile<E, D>(gs, dout, g, ti.b, ti.h, i0, -1);
    {
      const int64_t t = i0 + threadIdx.x;
      stat[0][threadIdx.x] = t < g.T ? row_max[head + t] : 0.0f;
      stat[1][threadIdx.x] = t < g.T ? row_sum[head + t] : 1.0f;
      stat[2][threadIdx.x] = t < g.T ? delta[head + t] : 0.0f;
    }
    __syncthreads();
    if (!active) continue;
    const int first = int(max(int64_t(0), j - i0)), n = int(min(int64_t(kTileRows), g.T - i0));
    for (int ii = first; ii < n; ++ii) {
      const float s = g.scale * dot_rs<E, D>(k, qs[ii]) + 0.0f;
      const float p = tmath::exp_f32(s - stat[0][ii]) / stat[1][ii];
      if constexpr (kWantDk) {
        const float ds = tmath::softmax_ds(g.scale, p, dot_rs<E, D>(v, gs[ii]), stat[2][ii]);
#pragma unroll
        for (int d = 0; d < D; ++d) acc[d] = __fmaf_rn(ds, qs[ii][d], acc[d]);
      } else {
#pragma unroll
        for (int d = 0; d < D; ++d) acc[d] = __fmaf_rn(p, gs[ii][d], acc[d]);
      }
    }
  }
  if (!active) return;
  E* o = const_cast<E*>(qkv_at(static_cast<const E*>(dqkv), g, ti.b, ti.h, j, kWantDk ? 1 : 2));
#pragma unroll
  for (int d = 0; d < D; ++d) o[d] = from_f32<E>(acc[d]);
}

unsigned tiled_blocks(const Geometry& g, const char* what) {
  const int64_t b = g.B * g.H * ((g.T + kTileRows - 1) / kTileRows);
  AMP_CHECK(b <= int64_t(INT32_MAX), what, ": too many rows (", g.B * g.H * g.T, ")");
  return unsigned(b);
}

unsigned attention_blocks(const Geometry& g, const char* what) {
  const int64_t rows = g.B * g.H * g.T, b = (rows + kAttnThreads - 1) / kAttnThreads;
  AMP_CHECK(b <= int64_t(INT32_MAX), what, ": too many rows (", rows, ")");
  return unsigned(b);
}

}  // namespace

void CudaOps::attention_forward(const AttentionArgs& a) {
  check_args(a);
  if (a.B * a.T * a.H * a.D == 0) return;
  const Geometry g{a.B, a.T, a.H, a.D, a.scale};
  if (!exact_attention_ && attention_tc_fits(a.type, a.D, {a.qkv, a.out})) {
    attention_tc_forward(a, stream_);
    return;
  }
  dispatch_float(a.type, "attention_forward", [&](auto et) {
    using E = decltype(et);
    if (a.D == 64) {
      attention_forward_tiled<E, 64><<<tiled_blocks(g, "attention_forward"), kTileRows, 0, stream_>>>(
          static_cast<const E*>(a.qkv), static_cast<E*>(a.out), a.row_max, a.row_sum, g);
      AMP_CHECK_LAUNCH("attention_forward_tiled");
      return;
    }
    const unsigned blocks = attention_blocks(g, "attention_forward");
    attention_forward_kernel<E><<<blocks, kAttnThreads, 0, stream_>>>(static_cast<const E*>(a.qkv),
                                                                      static_cast<E*>(a.out), a.row_max, a.row_sum, g);
    AMP_CHECK_LAUNCH("attention_forward_kernel");
  });
}

void CudaOps::attention_backward(const AttentionBackwardArgs& a) {
  check_args(a);
  if (a.B * a.T * a.H * a.D == 0) return;
  const Geometry g{a.B, a.T, a.H, a.D, a.scale};
  const unsigned blocks = attention_blocks(g, "attention_backward");
  dispatch_float(a.type, "attention_backward", [&](auto et) {
    using E = decltype(et);
    const E* qkv = static_cast<const E*>(a.qkv);
    const E* dout = static_cast<const E*>(a.dout);
    E* dqkv = static_cast<E*>(a.dqkv);
    attention_delta_kernel<E><<<blocks, kAttnThreads, 0, stream_>>>(static_cast<const E*>(a.out), dout, a.delta, g);
    AMP_CHECK_LAUNCH("attention_delta_kernel");
    if (!exact_attention_ && attention_tc_fits(a.type, a.D, {a.qkv, a.out, a.dout, a.dqkv})) {
      attention_tc_backward(a, stream_);
      return;
    }
    if (a.D == 64) {
      const unsigned tiles = tiled_blocks(g, "attention_backward");
      attention_dq_tiled<E, 64><<<tiles, kTileRows, 0, stream_>>>(qkv, dout, a.row_max, a.row_sum, a.delta, dqkv, g);
      AMP_CHECK_LAUNCH("attention_dq_tiled");
      attention_dkv_tiled<E, 64, true><<<tiles, kTileRows, 0, stream_>>>(qkv, dout, a.row_max, a.row_sum, a.delta,
                                                                           dqkv, g);
      AMP_CHECK_LAUNCH("attention_dkv_tiled (dk)");
      attention_dkv_tiled<E, 64, false><<<tiles, kTileRows, 0, stream_>>>(qkv, dout, a.row_max, a.row_sum, a.delta,
                                                                            dqkv, g);
      AMP_CHECK_LAUNCH("attention_dkv_tiled (dv)");
      return;
    }
    attention_dq_kernel<E><<<blocks, kAttnThreads, 0, stream_>>>(qkv, dout, a.row_max, a.row_sum, a.delta, dqkv, g);
    AMP_CHECK_LAUNCH("attention_dq_kernel");
    attention_dkv_kernel<E><<<blocks, kAttnThreads, 0, stream_>>>(qkv, dout, a.row_max, a.row_sum, a.delta, dqkv, g);
    AMP_CHECK_LAUNCH("attention_dkv_kernel");
  });
}

}  // namespace amp::cuda
