// The elementwise and per-row kernels of the CPU transformer ops on FP32 arrays, as one set per
// instruction set: the scalar specification (the tmath functions and row reductions of
// transformer_args.h), its AVX2 form (row_kernels.cpp) and its AVX-512F form
// (row_kernels_avx512.cpp), chosen at run time. Every set gives the specification's bits;
// tests/unit/test_ops_transformer.cpp runs each one the CPU has against the scalar one. The ops
// split the work between threads; ops_softmax.cpp converts 16-bit rows to FP32 around them, and
// ops_gelu.cpp tabulates their values for every 16-bit pattern once and looks them up.
#pragma once

#include <cstdint>
#include <vector>

namespace amp::cpu {

struct RowKernels {
  const char* isa;  // "scalar", "avx2", "avx512"
  // y = gelu(x) (tmath::gelu_tanh); y may be x. The vector forms' loops (a few dozen instructions for
  // 16 elements) ask for their inputs ahead (prefetch.h).
  void (*gelu_forward)(const float* x, float* y, int64_t n);
  // dx = dy * gelu'(x) (tmath::gelu_tanh_grad); dx may be dy or x.
  void (*gelu_backward)(const float* x, const float* dy, float* dx, int64_t n);
  // One causal-softmax row of n elements: v = softmax(scale * s) (causal_softmax_forward's
  // maximum, exp_f32 and sum in the 32 lanes, then one division each); v may be s. A non-null
  // stats receives the row's maximum and sum {m, sum_j exp_f32(scale * s_j - m)} (softmax_xent's
  // log-sum-exp).
  void (*softmax_forward)(const float* s, float scale, float* v, int64_t n, float* stats);
  // One row of causal_softmax_backward: ds = (scale * p) * (dp - dot), dot the 32-lane sum of
  // dp * p; ds may be dp.
  void (*softmax_backward)(const float* p, const float* dp, float scale, float* ds, int64_t n);
  // y = tmath::exp_f32(x) for x <= 0 or NaN; y may be x. The exp inside the kernels above and the
  // fused attention's tiles (vec_math.h), on its own for its tests.
  void (*exp_nonpositive)(const float* x, float* y, int64_t n);
  // The BF16 matmul attention's rows (ops_attention_matmul.cpp), each one pass fewer than the
  // FP32 kernels and the bulk conversions they replace, with their bits (float_to_bf16_bits of the
  // FP32 kernels' values). Only the AVX-512 set has them (null in the others): the path runs on AMX
  // CPUs, and only where the active set has them (CpuOps' constructor).
  // softmax_forward_bf16: softmax_forward's row (and stats) rounded into p16; s is overwritten.
  void (*softmax_forward_bf16)(float* s, float scale, uint16_t* p16, int64_t n, float* stats);
  // softmax_probs_bf16: the same row from its saved stats {m, sum}: round(exp_f32(scale * s - m) / sum).
  void (*softmax_probs_bf16)(const float* s, float scale, float m, float sum, uint16_t* p16, int64_t n);
  // softmax_backward_bf16: softmax_backward of the widened p16 (bf16_bits_to_float), rounded into ds16.
  void (*softmax_backward_bf16)(const uint16_t* p16, const float* dp, float scale, uint16_t* ds16, int64_t n);
  // The BF16 rows of the layer norm and the GELU backward, widened, computed and rounded in
  // registers (passes over a row in L1) instead of converted to FP32 scratch rows and back, with the
  // bits of that path (widen, the FP32 arithmetic of transformer_args.h, round once). Only the
  // AVX-512 set has them (null in the others: the ops convert).
  // layernorm_forward_bf16: one row of layernorm_forward: stats = {mean, rstd}, y rounded; y may be x.
  void (*layernorm_forward_bf16)(const uint16_t* x, const float* gamma, const float* beta, float eps, uint16_t* y,
                                 int64_t n, float* stats);
  // layernorm_backward_bf16: one row of layernorm_backward: dx = [dx +] ln_dx(...) rounded, and where
  // ag is not null the row's dgamma and dbeta terms added to the partials: ag += n * dy, ab += dy.
  // dx may be x or dy (each chunk is read before dx's is written).
  void (*layernorm_backward_bf16)(const uint16_t* x, const uint16_t* dy, const float* gamma, float mean, float rstd,
                                  uint16_t* dx, bool accumulate_dx, float* ag, float* ab, int64_t n);
  // gelu_backward_bf16_table: dx[i] = round(widen(dy[i]) * grad[x[i]]) for a table of 65536 floats
  // (ops_gelu.cpp's tabulated gelu'); dx may be dy or x.
  void (*gelu_backward_bf16_table)(const float* grad, const uint16_t* x, const uint16_t* dy, uint16_t* dx, int64_t n);
};

// The kernel sets this CPU can run, the scalar specification first, the widest last.
const std::vector<RowKernels>& available_row_kernels();
// The widest of them (what CpuOps uses).
const RowKernels& active_row_kernels();

// The AVX-512F set (row_kernels_avx512.cpp); only called where the CPU has AVX-512F.
const RowKernels& row_kernels_avx512();

}  // namespace amp::cpu
