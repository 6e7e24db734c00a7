// The fused causal attention on tensor cores (cuda/attention_tc.h says what it computes and how
// it differs from the specification). Head dimension 64, F16 or BF16; a block of 4 warps owns one
// 64-row tile (queries for the forward and dq, keys for dk and dv) and walks the other side's
// 64-row tiles in order; warp w owns rows 16w .. 16w + 15 of every per-row buffer, so between the
// block-wide tile loads only __syncwarp orders its steps. Each product is WMMA 16x16x16 fragments
// (16-bit inputs, FP32 accumulators); the elementwise steps (online softmax, P, dS) go through
// shared memory, lane l of a warp taking row l / 2 and columns 2c + l % 2 (c = 0 .. 31), whose
// FP32 reads hit each bank at most twice.
//
// Shared memory per block (dynamic, above the 48 KiB default for the backward kernels):
//   forward: K, V, Q then P (16-bit, 64 x 72 each), S then PV (FP32, 64 x 68): 44 KiB
//   dq:      K, V, Q then dO then dS (16-bit), S, dP (FP32): 61 KiB
//   dk, dv:  Q, dO, P^T, dS^T; K then V staged in P^T's tile (16-bit), S^T, dP^T (FP32),
//            the query tile's statistics: 71 KiB
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include "backend/transformer_args.h"
#include "cuda/attention_tc.h"
#include "cuda/kernel_util.cuh"

namespace amp::cuda {

namespace {

using namespace nvcuda;

constexpr int kD = 64;                              // head dimension
constexpr int kRows = 64;                           // rows of a tile
constexpr int kWarpRows = 16;                       // rows of a warp (one fragment high)
constexpr int kTcThreads = 32 * kRows / kWarpRows;  // 128
constexpr int kLd16 = kD + 8;                       // 16-bit tiles' row pitch: 144 B rows
constexpr int kLd32 = kRows + 4;                    // FP32 tiles' row pitch: 272 B rows
constexpr size_t kTile16 = size_t(kRows) * kLd16 * 2;
constexpr size_t kTile32 = size_t(kRows) * kLd32 * 4;
constexpr size_t kForwardSmem = 3 * kTile16 + kTile32;
constexpr size_t kDqSmem = 3 * kTile16 + 2 * kTile32;
constexpr size_t kDkvSmem = 4 * kTile16 + 2 * kTile32 + 3 * kRows * sizeof(float);
constexpr unsigned kFull = 0xffffffffu;
static_assert(kTcThreads == 128 && kLd16 % 8 == 0 && kLd32 % 4 == 0, "WMMA's leading dimensions");
static_assert((16 * kLd16 * 2) % 32 == 0 && (16 * kLd32 * 4) % 32 == 0, "fragments start 32-byte aligned");

template <typename E>
struct Mma;
template <>
struct Mma<BFloat16> {
  using T = __nv_bfloat16;
};
template <>
struct Mma<Half> {
  using T = __half;
};
template <typename E>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, typename Mma<E>::T, wmma::row_major>;
template <typename E>
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, typename Mma<E>::T, wmma::row_major>;
template <typename E>
using FragBt = wmma::fragment<wmma::matrix_b, 16, 16, 16, typename Mma<E>::T, wmma::col_major>;  // a tile's transpose
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

template <typename E>
__device__ __forceinline__ const typename Mma<E>::T* mma_ptr(const E* p) {
  return reinterpret_cast<const typename Mma<E>::T*>(p);
}

struct TcGeometry {
  int64_t B, T, H;
  float scale;
};

// Rows row0 .. row0 + 63 of a [B*T, pitch] tensor, 64 columns from `src` on, into a 16-bit tile;
// tile rows at or past `valid` are zeros. 16-byte loads (attention_tc_fits checked alignment).
template <typename E>
__device__ void load_tile(E* tile, const E* src, int64_t row0, int64_t valid, int64_t pitch) {
  for (int e = threadIdx.x; e < kRows * 8; e += kTcThreads) {
    const int r = e >> 3, c = e & 7;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (r < valid) v = *reinterpret_cast<const uint4*>(src + (row0 + r) * pitch + c * 8);
    *reinterpret_cast<uint4*>(tile + r * kLd16 + c * 8) = v;
  }
}

// The warp's four A fragments (its 16 rows, 64 columns) of a 16-bit tile.
template <typename E>
__device__ __forceinline__ void load_a(FragA<E> (&a)[4], const E* rows) {
#pragma unroll
  for (int k = 0; k < 4; ++k) wmma::load_matrix_sync(a[k], mma_ptr(rows + 16 * k), kLd16);
}

// out[16 x 64] (FP32, pitch kLd32) = a[16 x 64] * B, B = tile^T (kTransposed) or tile, tile a
// 16-bit [64 x 64] tile.
template <bool kTransposed, typename E>
__device__ __forceinline__ void product(float* out, const FragA<E> (&a)[4], const E* tile) {
#pragma unroll
  for (int n = 0; n < 4; ++n) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if constexpr (kTransposed) {
        FragBt<E> b;
        wmma::load_matrix_sync(b, mma_ptr(tile + 16 * n * kLd16 + 16 * k), kLd16);
        wmma::mma_sync(acc, a[k], b, acc);
      } else {
        FragB<E> b;
        wmma::load_matrix_sync(b, mma_ptr(tile + 16 * k * kLd16 + 16 * n), kLd16);
        wmma::mma_sync(acc, a[k], b, acc);
      }
    }
    wmma::store_matrix_sync(out + 16 * n, acc, kLd32, wmma::mem_row_major);
  }
}

// acc[n] += a[16 x 64] * tile[64 x 64] (16-bit tile, row-major).
template <typename E>
__device__ __forceinline__ void accumulate_product(FragC (&acc)[4], const FragA<E> (&a)[4], const E* tile) {
#pragma unroll
  for (int n = 0; n < 4; ++n)
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      FragB<E> b;
      wmma::load_matrix_sync(b, mma_ptr(tile + 16 * k * kLd16 + 16 * n), kLd16);
      wmma::mma_sync(acc[n], a[k], b, acc[n]);
    }
}

// Writes the lane's row of the warp's 16 x 64 FP32 results (pitch kLd32) as 16-bit values.
template <typename E>
__device__ __forceinline__ void store_row(E* dst, const float* rows, int r, int half) {
#pragma unroll
  for (int c = 0; c < 32; ++c) dst[2 * c + half] = from_f32<E>(rows[r * kLd32 + 2 * c + half]);
}

// Block x: head (b, h) = x / tiles, its tile x % tiles, counted from the last (the query tiles'
// longest work first) or from the first (the key tiles').
struct Tile {
  int64_t b, h, row0;
};
__device__ __forceinline__ Tile tile_of(const TcGeometry& g, bool from_last) {
  const int64_t tiles = (g.T + kRows - 1) / kRows, bh = blockIdx.x / tiles, t = blockIdx.x % tiles;
  return Tile{bh / g.H, bh % g.H, (from_last ? tiles - 1 - t : t) * kRows};
}

template <typename E>
__global__ void __launch_bounds__(kTcThreads)
    attention_forward_tc(const E* qkv, E* out, float* row_max, float* row_sum, TcGeometry g) {
  extern __shared__ __align__(128) unsigned char smem[];
  E* ks = reinterpret_cast<E*>(smem);
  E* vs = reinterpret_cast<E*>(smem + kTile16);
  E* ps = reinterpret_cast<E*>(smem + 2 * kTile16);  // Q, then each warp's P rows
  float* ss = reinterpret_cast<float*>(smem + 3 * kTile16);
  const Tile tl = tile_of(g, true);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
  const int64_t q0 = tl.row0, i = q0 + warp * kWarpRows + r, pitch = 3 * g.H * kD;
  const E* qh = qkv + tl.h * kD;
  E* pw = ps + warp * kWarpRows * kLd16;
  float* sw = ss + warp * kWarpRows * kLd32;

  load_tile(ps, qh, tl.b * g.T + q0, g.T - q0, pitch);
  __syncthreads();
  FragA<E> qa[4];
  load_a(qa, pw);
  float o[32];
#pragma unroll
  for (int c = 0; c < 32; ++c) o[c] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int64_t last = min(g.T, q0 + kRows) - 1;
  for (int64_t j0 = 0; j0 <= last; j0 += kRows) {
    __syncthreads();  // every warp is done with the previous K and V tiles
    load_tile(ks, qh + g.H * kD, tl.b * g.T + j0, g.T - j0, pitch);
    load_tile(vs, qh + 2 * g.H * kD, tl.b * g.T + j0, g.T - j0, pitch);
    __syncthreads();
    product<true>(sw, qa, ks);
    __syncwarp();
    float s[32], mt = m;
#pragma unroll
    for (int c = 0; c < 32; ++c) {
      s[c] = g.scale * sw[r * kLd32 + 2 * c + half] + 0.0f;
      if (j0 + 2 * c + half <= i && (s[c] > mt || s[c] != s[c])) mt = s[c];
    }
    const float mo = __shfl_xor_sync(kFull, mt, 1);
    if (mo > mt || mo != mo) mt = mo;
    const float corr = __expf(m - mt);
    float tile_sum = 0.0f;
#pragma unroll
    for (int c = 0; c < 32; ++c) {
      const float p = j0 + 2 * c + half <= i ? __expf(s[c] - mt) : 0.0f;
      tile_sum += p;
      pw[r * kLd16 + 2 * c + half] = from_f32<E>(p);
    }
    tile_sum += __shfl_xor_sync(kFull, tile_sum, 1);
    l = l * corr + tile_sum;
    m = mt;
    __syncwarp();
    FragA<E> pa[4];
    load_a(pa, pw);
    product<false>(sw, pa, vs);  // P V (the scores are consumed)
    __syncwarp();
#pragma unroll
    for (int c = 0; c < 32; ++c) o[c] = o[c] * corr + sw[r * kLd32 + 2 * c + half];
  }
  if (i >= g.T) return;
  E* orow = out + (tl.b * g.T + i) * g.H * kD + tl.h * kD;
#pragma unroll
  for (int c = 0; c < 32; ++c) orow[2 * c + half] = from_f32<E>(o[c] / l);
  if (half == 0) {
    const int64_t si = (tl.b * g.H + tl.h) * g.T + i;
    row_max[si] = m;
    row_sum[si] = l;
  }
}

// dq: the block's 64 queries against the key tiles 0 .. its own.
template <typename E>
__global__ void __launch_bounds__(kTcThreads)
    attention_dq_tc(const E* qkv, const E* dout, const float* row_max, const float* row_sum, const float* delta,
                    E* dqkv, TcGeometry g) {
  extern __shared__ __align__(128) unsigned char smem[];
  E* ks = reinterpret_cast<E*>(smem);
  E* vs = reinterpret_cast<E*>(smem + kTile16);
  E* dss = reinterpret_cast<E*>(smem + 2 * kTile16);  // Q, then dO, then each warp's dS rows
  float* ss = reinterpret_cast<float*>(smem + 3 * kTile16);
  float* dps = reinterpret_cast<float*>(smem + 3 * kTile16 + kTile32);
  const Tile tl = tile_of(g, true);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
  const int64_t q0 = tl.row0, i = q0 + warp * kWarpRows + r, pitch = 3 * g.H * kD;
  const E* qh = qkv + tl.h * kD;
  E* dsw = dss + warp * kWarpRows * kLd16;
  float* sw = ss + warp * kWarpRows * kLd32;
  float* dpw = dps + warp * kWarpRows * kLd32;

  FragA<E> qa[4], ga[4];
  load_tile(dss, qh, tl.b * g.T + q0, g.T - q0, pitch);
  __syncthreads();
  load_a(qa, dsw);
  __syncthreads();
  load_tile(dss, dout + tl.h * kD, tl.b * g.T + q0, g.T - q0, g.H * kD);
  __syncthreads();
  load_a(ga, dsw);
  const int64_t si = (tl.b * g.H + tl.h) * g.T + i;
  const float rm = i < g.T ? row_max[si] : 0.0f, inv_l = i < g.T ? 1.0f / row_sum[si] : 0.0f,
              dl = i < g.T ? delta[si] : 0.0f;
  FragC dq[4];
#pragma unroll
  for (int n = 0; n < 4; ++n) wmma::fill_fragment(dq[n], 0.0f);
  const int64_t last = min(g.T, q0 + kRows) - 1;
  for (int64_t j0 = 0; j0 <= last; j0 += kRows) {
    __syncthreads();
    load_tile(ks, qh + g.H * kD, tl.b * g.T + j0, g.T - j0, pitch);
    load_tile(vs, qh + 2 * g.H * kD, tl.b * g.T + j0, g.T - j0, pitch);
    __syncthreads();
    product<true>(sw, qa, ks);   // S
    product<true>(dpw, ga, vs);  // dP
    __syncwarp();
#pragma unroll
    for (int c = 0; c < 32; ++c) {
      const int col = 2 * c + half;
      float ds = 0.0f;
      if (j0 + col <= i) {
        const float p = __expf(g.scale * sw[r * kLd32 + col] + 0.0f - rm) * inv_l;
        ds = tmath::softmax_ds(g.scale, p, dpw[r * kLd32 + col], dl);
      }
      dsw[r * kLd16 + col] = from_f32<E>(ds);
    }
    __syncwarp();
    FragA<E> da[4];
    load_a(da, dsw);
    accumulate_product(dq, da, ks);
  }
#pragma unroll
  for (int n = 0; n < 4; ++n) wmma::store_matrix_sync(sw + 16 * n, dq[n], kLd32, wmma::mem_row_major);
  __syncwarp();
  if (i < g.T) store_row(dqkv + (tl.b * g.T + i) * pitch + tl.h * kD, sw, r, half);
}

// dk and dv: the block's 64 keys against the query tiles from its own to the last.
template <typename E>
__global__ void __launch_bounds__(kTcThreads)
    attention_dkv_tc(const E* qkv, const E* dout, const float* row_max, const float* row_sum, const float* delta,
                     E* dqkv, TcGeometry g) {
  extern __shared__ __align__(128) unsigned char smem[];
  E* qs = reinterpret_cast<E*>(smem);
  E* gs = reinterpret_cast<E*>(smem + kTile16);
  E* pts = reinterpret_cast<E*>(smem + 2 * kTile16);  // K, then V, then each warp's P^T rows
  E* dsts = reinterpret_cast<E*>(smem + 3 * kTile16);
  float* ss = reinterpret_cast<float*>(smem + 4 * kTile16);
  float* dps = reinterpret_cast<float*>(smem + 4 * kTile16 + kTile32);
  float* st_max = reinterpret_cast<float*>(smem + 4 * kTile16 + 2 * kTile32);
  float* st_inv = st_max + kRows;
  float* st_delta = st_inv + kRows;
  const Tile tl = tile_of(g, false);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
  const int64_t k0 = tl.row0, j = k0 + warp * kWarpRows + r, pitch = 3 * g.H * kD;
  const E* qh = qkv + tl.h * kD;
  const E* gh = dout + tl.h * kD;
  E* ptw = pts + warp * kWarpRows * kLd16;
  E* dstw = dsts + warp * kWarpRows * kLd16;
  float* sw = ss + warp * kWarpRows * kLd32;
  float* dpw = dps + warp * kWarpRows * kLd32;

  FragA<E> ka[4], va[4];
  load_tile(pts, qh + g.H * kD, tl.b * g.T + k0, g.T - k0, pitch);
  __syncthreads();
  load_a(ka, ptw);
  __syncthreads();
  load_tile(pts, qh + 2 * g.H * kD, tl.b * g.T + k0, g.T - k0, pitch);
  __syncthreads();
  load_a(va, ptw);
  FragC dk[4], dv[4];
#pragma unroll
  for (int n = 0; n < 4; ++n) wmma::fill_fragment(dk[n], 0.0f), wmma::fill_fragment(dv[n], 0.0f);
  const int64_t head = (tl.b * g.H + tl.h) * g.T;
  for (int64_t i0 = k0; i0 < g.T; i0 += kRows) {
    __syncthreads();
    load_tile(qs, qh, tl.b * g.T + i0, g.T - i0, pitch);
    load_tile(gs, gh, tl.b * g.T + i0, g.T - i0, g.H * kD);
    if (threadIdx.x < kRows) {
      const int64_t t = i0 + threadIdx.x;
      st_max[threadIdx.x] = t < g.T ? row_max[head + t] : 0.0f;
      st_inv[threadIdx.x] = t < g.T ? 1.0f / row_sum[head + t] : 0.0f;
      st_delta[threadIdx.x] = t < g.T ? delta[head + t] : 0.0f;
    }
    __syncthreads();
    product<true>(sw, ka, qs);   // S^T: [keys, queries]
    product<true>(dpw, va, gs);  // dP^T
    __syncwarp();
#pragma unroll
    for (int c = 0; c < 32; ++c) {
      const int col = 2 * c + half;
      const int64_t q = i0 + col;
      float p = 0.0f, ds = 0.0f;
      if (q >= j && q < g.T) {
        p = __expf(g.scale * sw[r * kLd32 + col] + 0.0f - st_max[col]) * st_inv[col];
        ds = tmath::softmax_ds(g.scale, p, dpw[r * kLd32 + col], st_delta[col]);
      }
      ptw[r * kLd16 + col] = from_f32<E>(p);
      dstw[r * kLd16 + col] = from_f32<E>(ds);
    }
    __syncwarp();
    FragA<E> pa[4], da[4];
    load_a(pa, ptw);
    load_a(da, dstw);
    accumulate_product(dv, pa, gs);  // dV += P^T dO
    accumulate_product(dk, da, qs);  // dK += dS^T Q
  }
#pragma unroll
  for (int n = 0; n < 4; ++n) {
    wmma::store_matrix_sync(sw + 16 * n, dk[n], kLd32, wmma::mem_row_major);
    wmma::store_matrix_sync(dpw + 16 * n, dv[n], kLd32, wmma::mem_row_major);
  }
  __syncwarp();
  if (j >= g.T) return;
  E* row = dqkv + (tl.b * g.T + j) * pitch + tl.h * kD;
  store_row(row + g.H * kD, sw, r, half);
  store_row(row + 2 * g.H * kD, dpw, r, half);
}

unsigned tc_blocks(const TcGeometry& g, const char* what) {
  const int64_t b = g.B * g.H * ((g.T + kRows - 1) / kRows);
  AMP_CHECK(b <= int64_t(INT32_MAX), what, ": too many rows (", g.B * g.H * g.T, ")");
  return unsigned(b);
}

// Launches kernel with `smem` bytes of dynamic shared memory (raising the function's limit first:
// a host-side attribute, allowed while the stream is captured).
template <typename... P, typename... A>
void launch(void (*kernel)(P...), unsigned blocks, size_t smem, cudaStream_t stream, const char* name, A... args) {
  AMP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<blocks, kTcThreads, smem, stream>>>(args...);
  AMP_CHECK_LAUNCH(name);
}

template <typename F>
void dispatch_16(DType t, F&& f) {
  if (t == DType::BF16)
    f(BFloat16{});
  else
    f(Half{});
}

}  // namespace

bool attention_tc_fits(DType type, int64_t D, std::initializer_list<const void*> tensors) {
  if ((type != DType::BF16 && type != DType::F16) || D != kD) return false;
  for (const void* p : tensors)
    if (!aligned_to(p, 16)) return false;
  return true;
}

void attention_tc_forward(const AttentionArgs& a, cudaStream_t stream) {
  const TcGeometry g{a.B, a.T, a.H, a.scale};
  const unsigned blocks = tc_blocks(g, "attention_forward");
  dispatch_16(a.type, [&](auto et) {
    using E = decltype(et);
    launch(attention_forward_tc<E>, blocks, kForwardSmem, stream, "attention_forward_tc", static_cast<const E*>(a.qkv),
           static_cast<E*>(a.out), a.row_max, a.row_sum, g);
  });
}

void attention_tc_backward(const AttentionBackwardArgs& a, cudaStream_t stream) {
  const TcGeometry g{a.B, a.T, a.H, a.scale};
  const unsigned blocks = tc_blocks(g, "attention_backward");
  dispatch_16(a.type, [&](auto et) {
    using E = decltype(et);
    const E* qkv = static_cast<const E*>(a.qkv);
    const E* dout = static_cast<const E*>(a.dout);
    E* dqkv = static_cast<E*>(a.dqkv);
    launch(attention_dq_tc<E>, blocks, kDqSmem, stream, "attention_dq_tc", qkv, dout, a.row_max, a.row_sum, a.delta,
           dqkv, g);
    launch(attention_dkv_tc<E>, blocks, kDkvSmem, stream, "attention_dkv_tc", qkv, dout, a.row_max, a.row_sum,
           a.delta, dqkv, g);
  });
}

}  // namespace amp::cuda
