// The compute ops a model is written in: casts, GEMMs (the linear layers' fused forms and the
// general strided/batched product), elementwise adds and row sums, activations, losses. 16-bit (or FP32) operands, FP32 math and
// accumulation, one rounding to the output's dtype. Pointers are backend memory (memory.h).
#pragma once

#include <cstdint>

#include "backend/attention_args.h"
#include "backend/ops_args.h"
#include "backend/tensor.h"
#include "backend/transformer_args.h"
#include "core/activation.h"
#include "core/dtype.h"
#include "core/error.h"

namespace amp {

class ComputeOps {
 public:
  virtual ~ComputeOps() = default;

  // Converts between f32/f16/bf16, bit-identical to the scalar conversions of core/half.h.
  virtual void cast(const void* src, DType src_type, void* dst, DType dst_type, size_t n) = 0;

  // ---- linear layers: y's dtype out, bias added before the one rounding ------------------------
  // y[B,out] = x[B,in] * w[out,in]^T + b[out]; b has w's dtype.
  virtual void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) = 0;
  // dx[B,in] = dy[B,out] * w[out,in]
  virtual void linear_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx) = 0;
  // dw[out,in] = dy^T * x, db[out] = sum over rows of dy (FP32 sums, one rounding each)
  virtual void linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) = 0;

  // FP8 operands of the linear layers (precision.compute fp8): quantize to FP8 and back to the
  // compute dtype with a per-tensor scale, recording the tensor's amax (backend/ops_args.h).
  virtual void fp8_quantize(const Fp8QuantizeArgs& a) = 0;
  // The native form (backend/ops_args.h): FP8 codes (and their transpose), and the FP8 GEMM with
  // per-tensor scales. native_fp8_gemm(): whether fp8_gemm runs on FP8 tensor cores here (the
  // linear layers then use it); elsewhere the twin computes the same from dequantized values.
  virtual void fp8_cast(const Fp8CastArgs& a) = 0;
  virtual void fp8_gemm(const Fp8GemmArgs& g) = 0;
  virtual bool native_fp8_gemm() const { return false; }

  // ---- general ops (semantics in backend/ops_args.h) ---------------------------------------------
  // Whether a GEMM runs faster with its dimensions padded to a multiple of 64 than at an odd width,
  // enough to pay for copying an operand into a padded buffer: a GPU's tensor-core kernels (GPT-2's
  // LM head, docs/benchmarks.md: 5x faster at 50304 than at 50257), not the CPU's oneDNN (slower
  // there at the padded width). Models choose their buffers by it (Gpt's padded LM head).
  virtual bool prefers_padded_gemm() const { return false; }
  // C[b] = alpha op(A[b]) op(B[b]) + beta C[b]: row-major, transposes, leading dimensions, batch
  // strides (0: broadcast), FP32 accumulation, one rounding. Attention's products; any linear layer.
  virtual void gemm(const GemmArgs& g) = 0;
  // out = a + b elementwise (residual connections), FP32 math, one rounding.
  virtual void add(const AddArgs& a) = 0;
  // out[j] = sum over rows of x[:, j] in a fixed order (bias gradients), no atomics.
  virtual void row_sum(const RowSumArgs& r) = 0;

  // ---- transformer ops (semantics in backend/transformer_args.h) ------------------------------
  // LayerNorm with FP32 statistics saved for backward; dx optionally accumulated (residual path).
  virtual void layernorm_forward(const LayerNormArgs& a) = 0;
  virtual void layernorm_backward(const LayerNormBackwardArgs& a) = 0;
  // Row softmax of scale * S under a causal mask (zeros above the diagonal), FP32 math, and its backward.
  virtual void causal_softmax_forward(const CausalSoftmaxArgs& a) = 0;
  virtual void causal_softmax_backward(const CausalSoftmaxBackwardArgs& a) = 0;
  // Fused causal self-attention from the QKV projection's output (backend/attention_args.h): no
  // [T, T] matrix kept, two FP32 statistics per row saved; backward recomputes the probabilities.
  virtual void attention_forward(const AttentionArgs& a) = 0;
  virtual void attention_backward(const AttentionBackwardArgs& a) = 0;
  // x = wte[token] + wpe[position]; backward writes dwpe and accumulates dwte, deterministically.
  virtual void embedding_forward(const EmbeddingArgs& a) = 0;
  virtual void embedding_backward(const EmbeddingBackwardArgs& a) = 0;
  // Scratch of embedding_backward for up to max_tokens positions and vocab tokens (outside captures).
  virtual void reserve_embedding(int64_t max_tokens, int64_t vocab) = 0;

  // y = act(z); dz = dy * act'(z). Math in FP32, results rounded to the tensors' dtype.
  virtual void activation_forward(Activation a, const Tensor& z, const Tensor& y) = 0;
  virtual void activation_backward(Activation a, const Tensor& z, const Tensor& dy, const Tensor& dz) = 0;

  // ---- losses (FP32 math from low-precision predictions) -----------------------------------------
  // Softmax cross-entropy (semantics in backend/ops_args.h): adds the batch's summed loss to
  // *loss_sum and its hits to *correct; with dlogits, (softmax - onehot) * (*scale) * inv_count.
  virtual void softmax_xent(const SoftmaxXentArgs& a) = 0;
  // Squared error summed over elements into *loss_sum; dpred = 2 (pred - target) * scale * inv_count.
  virtual void mse(const Tensor& pred, const Tensor& target, const float* scale, float inv_count,
                   const Tensor& dpred, float* loss_sum) = 0;
};

// The cross-entropy's arguments for dense row-major tensors (leading dimensions = columns; a
// null dlogits.data computes the loss only).
inline SoftmaxXentArgs dense_xent_args(const Tensor& logits, const int32_t* labels, const float* scale, float inv_count,
                                       const Tensor& dlogits, float* loss_sum, int32_t* correct) {
  SoftmaxXentArgs a;
  a.logits = logits.data, a.logits_type = logits.dtype;
  a.rows = int64_t(logits.rows), a.classes = int64_t(logits.cols), a.ld_logits = int64_t(logits.cols);
  a.labels = labels, a.scale = scale, a.inv_count = inv_count;
  a.dlogits = dlogits.data, a.dlogits_type = dlogits.dtype, a.ld_dlogits = int64_t(dlogits.cols);
  a.loss_sum = loss_sum, a.correct = correct;
  AMP_CHECK(!dlogits.data || (dlogits.rows == logits.rows && dlogits.cols == logits.cols), "softmax_xent: dlogits shape");
  return a;
}

}  // namespace amp
