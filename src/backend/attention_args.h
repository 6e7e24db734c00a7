// Fused causal self-attention (the flash-attention algorithm): arguments and numeric semantics of
// ComputeOps::attention_forward / attention_backward. The CPU twin is in
// src/backend/cpu/ops_attention.cpp (tiles in vector registers, AVX2 or AVX-512 chosen at run
// time, attention_tiles.h), the CUDA twin in cuda/ops_attention.cu. The explicit path (two batched
// GEMMs around causal_softmax_*, model.attention: explicit) is the reference they are tested
// against; this op keeps no [T, T] matrix: forward saves two FP32 numbers per row (the running
// maximum and the sum of the online softmax), backward recomputes the probabilities.
//
// Layout: qkv is [B*T, 3*H*D] in `type` (the QKV projection's output): row b*T + t holds the
// query of head h at columns h*D .. h*D + D - 1, its key at H*D + h*D, its value at 2*H*D + h*D.
// out is [B*T, H*D] (the heads side by side, as the output projection reads them). The FP32
// statistics row_max, row_sum (and backward's scratch delta) are [B, H, T]: index (b*H + h)*T + i.
//
// Specification (every value in FP32 from the exactly widened inputs; exp is tmath::exp_f32;
// dot(x, y) is the FMA chain a = +0; a = fma(x_d, y_d, a) over d in the order
//   F32, F16: d = 0, 1, ..., D-1;
//   BF16:     d = 1, 0, 3, 2, ..., the pairs (2p, 2p + 1) in turn, the odd element first (the last
//             element alone when D is odd). This is what one VDPBF16PS lane computes for a pair
//             (fma(x0, y0, fma(x1, y1, a)), each rounded once) when no input or partial sum is
//             subnormal, so CPUs with AVX-512-BF16 run the score and dP products natively where
//             every input of a head is zero or normal with |x| >= 2^-55 and finite (then every
//             product is a multiple of 2^-124 and so is every partial sum: none is subnormal, and
//             the instruction's flushing of subnormals never applies); other heads and CPUs run
//             the same chain in FP32 FMAs):
//   s_ij = scale * dot(q_i, k_j) + 0 for j <= i (the causal mask: keys after the query are never
//   read; adding +0 turns a -0 into +0, so the maxima below are unique whatever the order).
// attention_forward, per (b, h, i): the keys in tiles of kAttnKeyTile, tile t holding
//   j in [t*64, t*64 + 64) and j <= i, t = 0, 1, ... in order; m = -inf, l = 0, acc_d = 0; per tile
//     m' = max(m, max_j s_ij)         (NaN when any operand is NaN; no order: scores have no -0)
//     c = exp(m - m');  p_j = exp(s_ij - m')
//     l = l * c + tile_sum(p)         (two roundings; tile_sum: 8 lanes, lane k adding the p_j with
//                                      j = t*64 + k (mod 8) in increasing j from +0, then
//                                      ((L0 + L1) + (L2 + L3)) + ((L4 + L5) + (L6 + L7)))
//     acc_d = acc_d * c, then acc_d = fma(p_j, v_jd, acc_d) for the tile's j in increasing order
//     m = m'
//   out_id = round(acc_d / l); row_max_i = m, row_sum_i = l.
// attention_backward, from the forward's out, row_max, row_sum and the gradient dout:
//   delta_i = dot(dout_i, out_i)       (stored in the caller's scratch delta)
//   P_ij  = exp(s_ij - row_max_i) / row_sum_i,   dP_ij = dot(dout_i, v_j)
//   dS_ij = tmath::softmax_ds(scale, P_ij, dP_ij, delta_i) = (scale * P_ij) * (dP_ij - delta_i)
//   dq_i = round(chain of fma(dS_ij, k_j, .) over j = 0 .. i increasing, from +0)
//   dk_j = round(chain of fma(dS_ij, q_i, .) over i = j .. T-1 increasing, from +0)
//   dv_j = round(chain of fma(P_ij, dout_i, .) over i = j .. T-1 increasing, from +0)
//   dqkv is written entirely (no accumulation): every query, key and value column of every head.
// Every output element is one fixed chain, so the result does not depend on the thread count, the
// CPU's vector width or the CUDA launch shape: the twins give the same bits (NaN payloads aside).
// Three exceptions by default, deterministic and within the rounding of P and dS to the type of this
// specification: the CUDA backend runs F16 and BF16 at D = 64 on tensor cores (cuda/attention_tc.h:
// P and dS rounded to the type before their products, the hardware's sums); the CPU backend runs
// BF16 on oneDNN's BF16 matmul where that runs on AMX (src/backend/cpu/ops_attention_matmul.cpp:
// a query tile's scores against its keys in one product, the explicit path's row softmax, P and dS
// rounded before their products, oneDNN's sums), and elsewhere with AVX-512-BF16 on the kernels'
// BF16 products (src/backend/cpu/attention_pairs.h: the scores, m, l, delta and the FP32 P and dS
// as above; P and dS then rounded to BF16, and out's acc_d, dq, dk and dv chains over pairs of
// terms, one VDPBF16PS lane a pair, for heads whose inputs all allow native products as above; the
// other heads run this specification). CudaOps::set_exact_attention(true) and
// CpuOps::set_exact_attention(true) run this specification there too.
// Non-finite values propagate as in the explicit path: an inf or NaN score makes its row NaN, and
// the step's overflow check sees it.
//
// Memory per call: forward writes out and 2 floats per (b, h, i); backward needs delta (1 float per
// (b, h, i)); the CPU twin's per-thread scratch is about 8 * T * D floats (the head's Q, K, V, dO
// widened to FP32 and dQ's accumulator; with native BF16 products about 5 * T * D floats more:
// the head's BF16 rows, pairs and row pairs; the BF16 matmul path's about 5.5 * T * D floats and
// 3 * 64 * T: the head's BF16 rows, dK's and dV's sums, a query tile's scores and dP (FP32) and
// P and dS (BF16)), the CUDA twin's none (its kernels tile through shared memory).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"

namespace amp {

constexpr int64_t kAttnKeyTile = 64;  // keys per online-softmax step (part of the specification)

struct AttentionArgs {
  int64_t B = 0, T = 0, H = 0, D = 0;  // sequences, positions, heads, head dimension
  float scale = 1.0f;                  // typically 1/sqrt(D)
  DType type = DType::F32;             // qkv and out
  const void* qkv = nullptr;           // [B*T, 3*H*D]
  void* out = nullptr;                 // [B*T, H*D]
  float* row_max = nullptr;            // [B, H, T] FP32
  float* row_sum = nullptr;            // [B, H, T] FP32
};

struct AttentionBackwardArgs {
  int64_t B = 0, T = 0, H = 0, D = 0;
  float scale = 1.0f;        // the forward's
  DType type = DType::F32;   // qkv, out, dout, dqkv
  const void* qkv = nullptr;        // the forward's input [B*T, 3*H*D]
  const void* out = nullptr;        // the forward's output [B*T, H*D]
  const void* dout = nullptr;       // gradient of out [B*T, H*D]
  const float* row_max = nullptr;   // the forward's statistics [B, H, T]
  const float* row_sum = nullptr;
  float* delta = nullptr;           // scratch [B, H, T] FP32
  void* dqkv = nullptr;             // [B*T, 3*H*D], written
};

namespace detail {
inline void check_attention_shape(const char* what, int64_t B, int64_t T, int64_t H, int64_t D, float scale,
                                  DType type) {
  AMP_CHECK(B >= 0 && T >= 0 && H >= 0 && D >= 0, what, ": negative shape B=", B, " T=", T, " H=", H, " D=", D);
  AMP_CHECK(type == DType::F32 || type == DType::F16 || type == DType::BF16, what, ": unsupported dtype ",
            dtype_name(type));
  AMP_CHECK(scale == scale && scale - scale == 0.0f, what, ": scale not finite");
  AMP_CHECK(D <= 1024 && T < (int64_t(1) << 24) && H < (int64_t(1) << 16), what, ": shape beyond the op's limits T=",
            T, " H=", H, " D=", D, " (T < 2^24, H < 2^16, D <= 1024)");
}
}  // namespace detail

// Throws amp::Error (Internal: a caller's bug) naming the first violated rule.
inline void check_args(const AttentionArgs& a) {
  detail::check_attention_shape("attention_forward", a.B, a.T, a.H, a.D, a.scale, a.type);
  if (a.B * a.T * a.H * a.D == 0) return;
  AMP_CHECK(a.qkv && a.out && a.row_max && a.row_sum, "attention_forward: null pointer");
  AMP_CHECK(a.out != a.qkv && static_cast<void*>(a.row_max) != static_cast<void*>(a.row_sum),
            "attention_forward: outputs alias");
}

inline void check_args(const AttentionBackwardArgs& a) {
  detail::check_attention_shape("attention_backward", a.B, a.T, a.H, a.D, a.scale, a.type);
  if (a.B * a.T * a.H * a.D == 0) return;
  AMP_CHECK(a.qkv && a.out && a.dout && a.row_max && a.row_sum && a.delta && a.dqkv,
            "attention_backward: null pointer");
  AMP_CHECK(a.dqkv != a.qkv && a.dqkv != a.out && a.dqkv != a.dout, "attention_backward: dqkv aliases an input");
}

}  // namespace amp
