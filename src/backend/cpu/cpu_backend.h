// The CPU backend: host memory, oneDNN GEMMs, OpenMP loops. FP16 GEMM operands are widened to
// FP32 (oneDNN has no FP16 matmul without AVX512-FP16); BF16 runs natively where oneDNN can (AVX-512)
// and is widened like FP16 elsewhere; FP32 runs natively.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/cpu/matmul_dnnl.h"
#include "backend/cpu/ops_general.h"
#include "backend/cpu/ops_transformer.h"

namespace amp {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads);
  std::string name() const override;
  bool host_accessible() const override { return true; }

  Buffer alloc(size_t bytes) override;
  void upload(void* dst, const void* host_src, size_t bytes) override;
  void download(void* host_dst, const void* src, size_t bytes) override;
  void zero(void* dst, size_t bytes) override;
  void synchronize() override {}
  size_t memory_available(int ranks_on_node) const override;

  void cast(const void* src, DType src_type, void* dst, DType dst_type, size_t n) override;
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) override;
  void linear_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx) override;
  void linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) override;
  void gemm(const GemmArgs& g) override { general_.gemm(g); }
  void add(const AddArgs& a) override { general_.add(a); }
  void row_sum(const RowSumArgs& r) override { general_.row_sum(r); }
  void layernorm_forward(const LayerNormArgs& a) override { tops_.layernorm_forward(a); }
  void layernorm_backward(const LayerNormBackwardArgs& a) override { tops_.layernorm_backward(a); }
  void causal_softmax_forward(const CausalSoftmaxArgs& a) override { tops_.causal_softmax_forward(a); }
  void causal_softmax_backward(const CausalSoftmaxBackwardArgs& a) override { tops_.causal_softmax_backward(a); }
  void embedding_forward(const EmbeddingArgs& a) override { tops_.embedding_forward(a); }
  void embedding_backward(const EmbeddingBackwardArgs& a) override { tops_.embedding_backward(a); }
  void reserve_embedding(int64_t max_tokens, int64_t vocab) override { tops_.reserve(max_tokens, vocab); }
  void activation_forward(Activation a, const Tensor& z, const Tensor& y) override;
  void activation_backward(Activation a, const Tensor& z, const Tensor& dy, const Tensor& dz) override;
  void softmax_xent(const SoftmaxXentArgs& a) override;
  void mse(const Tensor& pred, const Tensor& target, const float* scale, float inv_count, const Tensor& dpred,
           float* loss_sum) override;
  void find_nonfinite(const void* grads, DType dtype, const std::vector<TensorSpan>& spans, size_t begin,
                      size_t end, int32_t* flag) override;
  void unscale_check(const void* grads, DType dtype, const std::vector<TensorSpan>& spans, const float* scale,
                     float* out32, int32_t* flags, float* norm_sq, int32_t* norm_bits = nullptr) override;
  std::vector<GradStats> grad_stats(const void* grads, DType dtype, const std::vector<TensorSpan>& spans) override;
  void optimizer_step(const OptimizerParams& p, const float* lr, float max_norm, float* master, const float* g32,
                      float* state1, float* state2, size_t n, void* lp, DType lp_dtype, const int32_t* flags,
                      const float* norm_sq, const ScalerState* scaler) override;
  void check_norm(const float* norm_sq, float max_norm, int32_t* flags) override;
  void sum_norm_partials(const int32_t* flags, int world, float* norm_sq) override;
  void update_scale(ScalerState* state, const ScalerParams& params, const int32_t* flags, int world) override;

  int threads() const { return threads_; }
  bool bf16_native() const { return bf16_native_; }
  cpu::DnnlMatmul& matmul() { return matmul_; }
  cpu::GeneralOps& general() { return general_; }  // tests and benchmarks: how a GEMM runs

 private:
  // GEMM with operands in `ab` (f32, bf16, or f16 widened here) and output in c's dtype.
  void gemm(const cpu::MatmulShape& s, const void* a, const void* b, const void* bias, void* c);
  float* scratch(int slot, size_t n);  // reusable FP32 buffers for widening

  int threads_;
  bool bf16_native_ = false;  // oneDNN has a BF16 matmul on this CPU
  cpu::DnnlMatmul matmul_;
  cpu::GeneralOps general_;
  cpu::TransformerOps tops_;
  std::vector<float> scratch_[4];
};

}  // namespace amp
