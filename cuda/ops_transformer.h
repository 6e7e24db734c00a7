// The transformer ops of backend/transformer_args.h on a CUDA stream, the twins of
// amp::cpu::TransformerOps (src/backend/cpu/ops_transformer.h): the same per-element functions
// (amp::tmath, compiled with --fmad=false) and the same fixed reduction orders, so the results are
// bit-identical to the CPU twin's (NaN payloads aside) and to every other run. No float atomics.
//
// Kernels (cuda/ops_transformer.cu):
// - layer norm forward, its dx, the softmax forward and backward: one warp per row, lane l taking
//   elements l, l + 32, ...; row sums and maxima by __shfl_xor_sync butterflies (the order of
//   transformer_args.h).
// - dgamma/dbeta: one block per 32-column tile with kRowSumLanes row lanes (row_sum's order).
// - GELU: grid-stride elementwise, 4 elements per thread (one vector load of 4 where aligned).
// - embedding forward: grid-stride elementwise.
// - embedding backward: (1) keys = tokens (out-of-range tokens as `vocab`, sorted last and skipped)
//   and values = positions 0..N-1; (2) CUB's stable radix sort of the pairs by key over the bits
//   of `vocab` (stable: a token's positions stay in increasing order); (3) one thread block per
//   (sorted index starting a token's run, 256-column tile) sums the run's dx rows in that order
//   and adds the sum to dwte once; (4) dwpe, one thread per (position, column) summing over b.
//   Integer work only in the sort; the result is unique, so it is deterministic.
//
// Not tuned yet: the row kernels read 32 consecutive elements per warp and step, and dgamma/dbeta
// run ceil(C/32) blocks whose lanes each walk rows/16 rows in order (the price of row_sum's fixed
// order); both are correct for any shape.
//
// Scratch and capture: embedding_backward needs reserve(max_tokens, vocab) beforehand: it
// allocates the sort's keys, values and CUB temporary storage (about 16 bytes per token plus
// CUB's needs) and must be called outside any graph capture. Every call only enqueues kernels on
// the given stream (no allocation, no host synchronization), so calls can be captured into a CUDA
// graph. The scratch is shared by the calls of one object: calls on different streams must not
// run concurrently (use one TransformerOps per stream).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/transformer_args.h"
#include "cudart/device_buffer.h"

namespace amp::cuda {

class TransformerOps {
 public:
  // Uses the current CUDA device. Allocates nothing until reserve().
  TransformerOps();
  ~TransformerOps();
  TransformerOps(const TransformerOps&) = delete;
  TransformerOps& operator=(const TransformerOps&) = delete;

  // Scratch of embedding_backward for up to max_tokens positions (B*T) and token ids below vocab.
  // Grows only (reallocating: not while earlier calls may still run, nor under capture). A call
  // beyond the reserve throws amp::Error.
  void reserve(int64_t max_tokens, int64_t vocab);
  // Device bytes held as scratch.
  size_t scratch_bytes() const;

  void layernorm_forward(const LayerNormArgs& a, cudaStream_t stream);
  void layernorm_backward(const LayerNormBackwardArgs& a, cudaStream_t stream);
  void causal_softmax_forward(const CausalSoftmaxArgs& a, cudaStream_t stream);
  void causal_softmax_backward(const CausalSoftmaxBackwardArgs& a, cudaStream_t stream);
  void gelu_tanh_forward(const GeluArgs& a, cudaStream_t stream);
  void gelu_tanh_backward(const GeluBackwardArgs& a, cudaStream_t stream);
  void embedding_forward(const EmbeddingArgs& a, cudaStream_t stream);
  void embedding_backward(const EmbeddingBackwardArgs& a, cudaStream_t stream);

 private:
  unsigned max_blocks_ = 1;  // cap of grid-stride grids (a few waves of the device)
  int64_t max_tokens_ = 0, vocab_ = 0;
  DeviceBuffer<uint32_t> keys_in_, keys_out_;  // [max_tokens]
  DeviceBuffer<int32_t> vals_in_, vals_out_;   // [max_tokens]
  DeviceBuffer<unsigned char> sort_temp_;      // CUB's temporary storage

  // CUB's temporary storage for n pairs sorted on end_bit key bits (in ops_transformer.cu: CUB is
  // compiled by nvcc only).
  static size_t sort_temp_bytes(int64_t n, int end_bit);
};

// Key bits of embedding_backward's sort: enough for 0..vocab (vocab marks out-of-range tokens).
inline int embedding_sort_bits(int64_t vocab) {
  int bits = 1;
  while (bits < 32 && (int64_t(1) << bits) <= vocab) ++bits;
  return bits;
}

}  // namespace amp::cuda
