// The transformer ops of backend/transformer_args.h on the CPU (layer norm, causal softmax, GELU
// with the tanh approximation, token + position embedding; forward and backward), the twins of
// amp::cuda::TransformerOps (cuda/ops_transformer.h): the same per-element functions (amp::tmath)
// and the same fixed reduction orders, so results are bit-identical to the CUDA twin's and do not
// depend on the number of OpenMP threads (the caller's: omp_set_num_threads).
//
// Parallelism: rows (layer norm, softmax, embedding forward), blocks of elements (GELU), (column
// tile, row lane) pairs for dgamma/dbeta, (token, column tile) and (position, column tile) pairs for
// the embedding's gradients. Every work item computes its outputs alone, in the fixed order.
//
// embedding_backward needs reserve(max_tokens, vocab) first (as on the CUDA twin, where the
// scratch cannot be allocated inside a graph capture); its scratch is shared, so calls of one
// object are serialized by a mutex. The other calls allocate small per-call buffers and may run
// concurrently.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/transformer_args.h"

namespace amp::cpu {

class TransformerOps {
 public:
  TransformerOps();
  ~TransformerOps();
  TransformerOps(const TransformerOps&) = delete;
  TransformerOps& operator=(const TransformerOps&) = delete;

  // Scratch of embedding_backward for up to max_tokens positions (B*T) and vocab tokens. Grows
  // only; a call beyond the reserve throws amp::Error.
  void reserve(int64_t max_tokens, int64_t vocab);

  void layernorm_forward(const LayerNormArgs& a);
  void layernorm_backward(const LayerNormBackwardArgs& a);
  void causal_softmax_forward(const CausalSoftmaxArgs& a);
  void causal_softmax_backward(const CausalSoftmaxBackwardArgs& a);
  void gelu_tanh_forward(const GeluArgs& a);
  void gelu_tanh_backward(const GeluBackwardArgs& a);
  void embedding_forward(const EmbeddingArgs& a);
  void embedding_backward(const EmbeddingBackwardArgs& a);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace amp::cpu
