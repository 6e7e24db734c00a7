// The fused causal attention on tensor cores (cuda/ops_attention_tc.cu): head dimension 64 in F16
// or BF16, the path CudaOps takes for those unless set_exact_attention(true). The flash-attention
// algorithm of backend/attention_args.h with the products on WMMA 16x16x16 tensor-core fragments
// accumulating in FP32; what differs from the specification (and so from the CPU twin's bits):
//   - every dot product (scores, dP, and the PV, dQ, dK, dV sums) is a tensor-core sum: exact
//     products of 16-bit inputs added in FP32 in the hardware's order (fixed for a device and a
//     shape, so a run repeats its bits; not the specification's chain);
//   - P (forward and backward) and dS are rounded to the input type before their products;
//   - exp is __expf (the special-function unit), the normalization a multiplication by 1/row_sum
//     in backward; row_sum sums the unrounded probabilities of a tile in the hardware's order.
// Results stay within the 16-bit rounding of P and dS of the specification's (tests/gpu: against
// a float64 reference, next to the exact path). No atomics: a block owns 64 queries (forward, dq)
// or 64 keys (dk, dv) and walks the other side's tiles in order, 16 rows per warp.
#pragma once

#include <cuda_runtime.h>

#include <initializer_list>

#include "backend/attention_args.h"

namespace amp::cuda {

// Whether the tensor-core kernels take this shape: F16 or BF16, D == 64, every pointer 16-byte
// aligned (the tiles are read and written 16 bytes at a time).
bool attention_tc_fits(DType type, int64_t D, std::initializer_list<const void*> tensors);

void attention_tc_forward(const AttentionArgs& a, cudaStream_t stream);

// dq, dk and dv (every column of dqkv); a.delta must already hold dot(dout_i, out_i).
void attention_tc_backward(const AttentionBackwardArgs& a, cudaStream_t stream);

}  // namespace amp::cuda
