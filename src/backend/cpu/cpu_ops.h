// The compute ops (backend/compute_ops.h) on the CPU, the twins of amp::cuda::CudaOps: oneDNN
// GEMMs, OpenMP loops. One class, its ops in files by family:
//   cpu_ops.cpp        cast, the linear layers (oneDNN matmul with a fused bias), activations, losses
//   ops_general.cpp    the strided batched GEMM, add, row_sum (backend/ops_args.h)
//   ops_layernorm.cpp, ops_softmax.cpp, ops_gelu.cpp, ops_embedding.cpp
//                      the transformer ops (backend/transformer_args.h), with the row reductions of
//                      transformer_rows.h
//   ops_fp8.cpp        the FP8 quantization of the linear layers' operands (precision.compute fp8)
//   ops_attention.cpp  the fused causal attention (backend/attention_args.h), its tile kernels in
//                      attention_kernels.h (scalar specification, AVX2, AVX-512 chosen at run time);
//                      ops_attention_matmul.cpp its BF16 path on oneDNN's products
//
// GEMMs: FP16 operands are widened to FP32 (oneDNN has no FP16 matmul without AVX512-FP16); BF16
// runs natively where oneDNN can (AVX-512, probed once by creating a BF16 primitive) and is widened
// like FP16 elsewhere; FP32 runs natively. Widening is exact, the product runs in FP32 and C is
// rounded to its dtype once. The general GEMM's primitives are cached per full signature (shape,
// leading dimensions, batch strides, dtypes, beta); alpha is a run-time argument. Layouts oneDNN
// refuses, or would run only through its reference implementation, go through dense FP32 copies.
//
// The transformer ops use the same per-element functions (amp::tmath) and fixed reduction orders
// as the CUDA twin, so results are bit-identical to it and independent of the OpenMP thread count
// (the caller's: omp_set_num_threads). Parallelism: rows (layer norm, softmax, embedding forward),
// blocks of elements (GELU), ranges of row lanes for the layer norm backward (dx and the
// dgamma/dbeta partials in one pass, each thread's rows in increasing order; (column tile, row
// lane) pairs, then rows, where the lanes would not share the threads evenly), (group of row lanes,
// column range) pairs for row_sum, each group's rows in increasing order, (token, column tile) and
// (position, column tile) pairs for the embedding's gradients; every work item computes its
// outputs alone, in the fixed order. Per-element and per-row math of GELU and the softmax runs in
// the widest kernel set of row_kernels.h the CPU has.
//
// Shared scratch (the GEMMs' widening buffers, embedding_backward's sort, layernorm_backward's
// partials) is guarded by mutexes:
// calls of one object may come from several threads. embedding_backward needs
// reserve_embedding(max_tokens, vocab) first, as on the CUDA twin.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/compute_ops.h"
#include "backend/cpu/matmul_dnnl.h"
#include "core/aligned_vector.h"

namespace amp::cpu {

class CpuOps final : public ComputeOps {
 public:
  CpuOps();
  ~CpuOps() override;
  CpuOps(const CpuOps&) = delete;
  CpuOps& operator=(const CpuOps&) = delete;

  void cast(const void* src, DType src_type, void* dst, DType dst_type, size_t n) override;
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) override;
  void linear_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx) override;
  void linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) override;
  void fp8_quantize(const Fp8QuantizeArgs& a) override;
  void fp8_cast(const Fp8CastArgs& a) override;
  void fp8_gemm(const Fp8GemmArgs& g) override;
  void gemm(const GemmArgs& g) override;
  void add(const AddArgs& a) override;
  void row_sum(const RowSumArgs& r) override;
  void layernorm_forward(const LayerNormArgs& a) override;
  void layernorm_backward(const LayerNormBackwardArgs& a) override;
  void causal_softmax_forward(const CausalSoftmaxArgs& a) override;
  void causal_softmax_backward(const CausalSoftmaxBackwardArgs& a) override;
  void attention_forward(const AttentionArgs& a) override;
  void attention_backward(const AttentionBackwardArgs& a) override;
  void embedding_forward(const EmbeddingArgs& a) override;
  void embedding_backward(const EmbeddingBackwardArgs& a) override;
  // Grows only; a call beyond the reserve throws amp::Error.
  void reserve_embedding(int64_t max_tokens, int64_t vocab) override;
  void activation_forward(Activation a, const Tensor& z, const Tensor& y) override;
  void activation_backward(Activation a, const Tensor& z, const Tensor& dy, const Tensor& dz) override;
  void softmax_xent(const SoftmaxXentArgs& a) override;
  void mse(const Tensor& pred, const Tensor& target, const float* scale, float inv_count, const Tensor& dpred,
           float* loss_sum) override;

  // Whether oneDNN multiplies BF16 operands natively on this CPU (else they are widened to FP32).
  bool bf16_native() const { return bf16_native_; }
  // The instruction set of the fused attention's kernels ("avx512bf16", "avx512", "avx2" or "scalar").
  const char* attention_isa() const;
  // The fused attention's paths, unless set_exact_attention(true): BF16 runs its products on
  // oneDNN's BF16 matmul where that runs on AMX (ops_attention_matmul.cpp), else on the kernels'
  // BF16 products where the CPU has AVX-512-BF16 (attention_pairs.h); both round P and dS to BF16,
  // as the CUDA twin's tensor cores. Every other case, and those with set_exact_attention(true),
  // the specification's kernels.
  void set_exact_attention(bool on) { exact_attention_ = on; }
  bool attention_on_matmul(DType type) const;
  bool attention_bf16_products(DType type) const;  // a head whose inputs bf16_dots_allowed refuses: exact
  // Whether attention of this type computes the specification's bits (neither path above).
  bool attention_exact(DType type) const { return !attention_on_matmul(type) && !attention_bf16_products(type); }
  // How gemm() runs these arguments: oneDNN's implementation name, followed by " (direct)" when it
  // reads and writes the caller's memory, or " (widened to f32)" when it goes through FP32 scratch.
  std::string gemm_implementation(const GemmArgs& g);
  DnnlMatmul& matmul() { return matmul_; }  // the linear layers' primitives (tests, benchmarks)
  // The GELU (tanh) op with its full arguments (backend/transformer_args.h), behind
  // activation_*(GeluTanh) (ops_gelu.cpp); public for its tests.
  void gelu_tanh_forward(const GeluArgs& a);
  void gelu_tanh_backward(const GeluBackwardArgs& a);

 private:
  // A linear layer's product with operands oneDNN cannot take widened to FP32 (cpu_ops.cpp).
  void linear_gemm(const MatmulShape& s, const void* a, const void* b, const void* bias, void* c);
  float* scratch(int slot, size_t n);  // reusable FP32 buffers for widening (under linear_mu_)
  // The fused attention on the matmul (ops_attention_matmul.cpp).
  void attention_forward_matmul(const AttentionArgs& a);
  void attention_backward_matmul(const AttentionBackwardArgs& a);

  // The general GEMM's primitives and scratch (ops_general.cpp).
  struct GemmPlans;
  struct GemmPlansDeleter {
    void operator()(GemmPlans* p) const;
  };
  static std::unique_ptr<GemmPlans, GemmPlansDeleter> make_gemm_plans();
  // embedding_backward's scratch (ops_embedding.cpp): a stable counting sort of positions by token.
  struct EmbeddingScratch {
    std::mutex mu;
    int64_t max_tokens = 0, vocab = 0;
    std::vector<int64_t> start;    // [vocab + 1]: segment starts of the counting sort
    std::vector<int64_t> cursor;   // [vocab]
    std::vector<int32_t> order;    // [max_tokens]: positions sorted by token, increasing within a token
    std::vector<int32_t> present;  // tokens that occur, increasing
  };

  // layernorm_backward's dgamma/dbeta partials (ops_layernorm.cpp), kept between calls: allocated
  // afresh (100-200 KB a call), a small process's heap gave them back and faulted them in again at
  // every call, half the op's time on 2 threads (docs/benchmarks.md).
  struct LayerNormScratch {
    std::mutex mu;
    aligned_vector<float> pg, pb;
  };

  bool bf16_native_ = false;  // oneDNN has a BF16 matmul on this CPU
  bool exact_attention_ = false;
  bool attention_matmul_ = false;  // oneDNN runs the attention's BF16 tile products on AMX
  DnnlMatmul matmul_;
  std::mutex linear_mu_;
  aligned_vector<float> scratch_[4];
  std::unique_ptr<GemmPlans, GemmPlansDeleter> plans_;
  EmbeddingScratch embedding_;
  LayerNormScratch layernorm_;
};

}  // namespace amp::cpu
