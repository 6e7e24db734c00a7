// The fused causal attention (backend/attention_args.h) on the device: the twin of
// src/backend/cpu/ops_attention.cpp, a direct transcription of the specification. One thread per
// output row (a query's forward and dq; a key's dk and dv), each walking its fixed chain with FP32
// accumulators in registers and local memory: no [T, T] matrix, no atomics, the CPU twin's bits
// (tmath::exp_f32 and explicit fmaf under --fmad=false). Not tuned yet: no shared-memory tiles
// and no tensor cores (the explicit path's cuBLAS GEMMs are the fast GPU path for now).
#include <type_traits>

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
  const unsigned blocks = attention_blocks(g, "attention_forward");
  dispatch_float(a.type, "attention_forward", [&](auto et) {
    using E = decltype(et);
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
    attention_dq_kernel<E><<<blocks, kAttnThreads, 0, stream_>>>(qkv, dout, a.row_max, a.row_sum, a.delta, dqkv, g);
    AMP_CHECK_LAUNCH("attention_dq_kernel");
    attention_dkv_kernel<E><<<blocks, kAttnThreads, 0, stream_>>>(qkv, dout, a.row_max, a.row_sum, a.delta, dqkv, g);
    AMP_CHECK_LAUNCH("attention_dkv_kernel");
  });
}

}  // namespace amp::cuda
