// The compute ops (backend/compute_ops.h) on one CUDA stream, the twins of amp::cpu::CpuOps. One
// class, its ops in files by family:
//   cuda_ops.cpp        cast, the linear layers (cuBLASLt with the bias epilogue, gemm.h),
//                       activations, losses (kernels in cast.cu, elementwise.cu, loss.cu)
//   ops_general.cpp/.cu the strided batched GEMM, add, row_sum (backend/ops_args.h)
//   ops_layernorm.cu, ops_softmax.cu, ops_gelu.cu, ops_embedding.cu (+ ops_embedding.cpp)
//                       the transformer ops (backend/transformer_args.h), with the warp reductions
//                       of row_kernels.cuh
//   ops_attention.cu    the fused causal attention (backend/attention_args.h); its tensor-core
//                       path in ops_attention_tc.cu (attention_tc.h)
//   ops_fp8.cu          the FP8 operand quantization and the scale update (precision.compute fp8)
//
// gemm: cuBLASLt with strided-batched matrix layouts (CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
//   CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET), CUBLAS_COMPUTE_32F (no TF32). Row-major is
//   expressed as the column-major transpose: C^T = op(B)^T op(A)^T, so cuBLAS's A is our B and its
//   B our A. Plans (descriptors, layouts, the heuristic's algorithm) are cached per signature
//   (shape, leading dimensions, batch strides, dtypes, pointer alignments); split-K reductions are
//   restricted to none or FP32 workspace partials, so C is rounded once. Where cuBLASLt has no
//   algorithm (unusual leading dimensions or alignments) the call goes to
//   cublasGemmStridedBatchedEx with the same mapping, math mode forbidding reduced-precision
//   reductions. k == 0 runs a small kernel (C = beta * C).
// add, row_sum, the bias gradient (row_sum's kernel): one thread block per (16-column tile,
//   segment of 512 rows) with kRowSumLanes row lanes, each lane loading 16 of its rows before
//   adding them in order, then the lanes in order; with several segments their FP32 sums are
//   folded in segment order by a second kernel (cuda/row_sum_order.cuh): the fixed order of
//   ops_args.h, bit-identical to the CPU twins.
// Transformer kernels: the same per-element functions as the CPU (amp::tmath, compiled with
//   --fmad=false) and the same fixed reduction orders, so results are bit-identical to the CPU
//   twin's (NaN payloads aside). No float atomics.
//   - layer norm forward, its dx, the softmax forward and backward: one warp per row, lane l taking
//     elements l, l + 32, ...; row sums and maxima by __shfl_xor_sync butterflies.
//   - dgamma/dbeta: row_sum's blocks and order (segments folded by a second kernel), 8 rows
//     loaded ahead of their adds.
//   - GELU: grid-stride elementwise, 4 elements per thread (one vector load of 4 where aligned).
//   - embedding backward: keys = tokens (out-of-range ones as `vocab`, sorted last and skipped),
//     values = positions; CUB's stable radix sort of the pairs over the bits of `vocab`; one thread
//     block per (run of a token, 256-column tile) sums the run's dx rows in order and adds the sum
//     to dwte once; dwpe one thread per (position, column) summing over b. Deterministic.
//   Not tuned yet: the row kernels read 32 consecutive elements per warp and step.
//
// Every call only enqueues work on the stream (no allocation after the first call of a signature,
// no host synchronization), so a step can be captured into a CUDA graph once each signature has
// run (or been planned with gemm_path) outside the capture. reserve_embedding, a GEMM needing a
// larger FP32 scratch and a column sum over more segments than before (row_sum, the layer norm's
// dgamma/dbeta) allocate, and refuse while the stream is capturing. The workspace and
// scratch are shared by the calls: one CudaOps per stream.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/compute_ops.h"
#include "cuda/gemm.h"
#include "cuda/kernels.h"
#include "cudart/device_buffer.h"
#include "cudart/host_wait.h"

namespace amp::cuda {

class CudaOps final : public ComputeOps {
 public:
  static constexpr size_t kDefaultWorkspaceBytes = size_t(32) << 20;  // 32 MiB (suits Hopper)

  // Uses the current CUDA device; creates the cuBLAS(Lt) handles and allocates the workspaces.
  // wait_check: what the host runs while it waits for the stream (host_wait.h; may be empty).
  CudaOps(cudaStream_t stream, const WaitCheck* wait_check, size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  void cast(const void* src, DType src_type, void* dst, DType dst_type, size_t n) override;
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) override;
  void linear_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx) override;
  void linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) override;
  void fp8_quantize(const Fp8QuantizeArgs& a) override;
  void fp8_cast(const Fp8CastArgs& a) override;
  // cuBLASLt's FP8 GEMM (LtGemm::run_fp8); throws naming the shape where it has no algorithm.
  void fp8_gemm(const Fp8GemmArgs& g) override;
  // FP8 tensor cores: compute capability 8.9 or later.
  bool native_fp8_gemm() const override;
  bool prefers_padded_gemm() const override { return true; }
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
  // Grows only (reallocating after waiting for the stream); a call beyond the reserve throws.
  void reserve_embedding(int64_t max_tokens, int64_t vocab) override;
  void activation_forward(Activation a, const Tensor& z, const Tensor& y) override;
  void activation_backward(Activation a, const Tensor& z, const Tensor& dy, const Tensor& dz) override;
  void softmax_xent(const SoftmaxXentArgs& a) override;
  void mse(const Tensor& pred, const Tensor& target, const float* scale, float inv_count, const Tensor& dpred,
           float* loss_sum) override;

  // Plans the GEMM without running it and says which library runs it: "cublasLt", "cublas"
  // (cuBLASLt had no algorithm) or "kernel" (k == 0) / "none" (empty). For tests, benchmarks and
  // planning ahead of a graph capture.
  std::string gemm_path(const GemmArgs& g);
  // Tests: send every general GEMM to the cublasGemmStridedBatchedEx path.
  void set_force_cublas(bool on);
  // The fused attention's path for F16/BF16 at head dimension 64: tensor cores (the default,
  // cuda/attention_tc.h) or, when on, the specification's FP32 chains (the CPU twin's bits).
  void set_exact_attention(bool on) { exact_attention_ = on; }
  // Device bytes held as embedding_backward's scratch.
  size_t embedding_scratch_bytes() const;

 private:
  Launch launch() const { return Launch{stream_, max_blocks_}; }
  void not_capturing(const char* what) const;  // throws while the stream is being captured
  void linear_gemm(const GemmCall& c);         // a linear layer's product (cuBLASLt, gemm.h)
  // An FP32 buffer of at least n elements for GEMM results that still get a bias (grown outside
  // captures only: the eager warm-up steps size it; outgrown ones are kept, a graph may hold them).
  float* f32_scratch(size_t n);
  // FP32 partials of row_sum's segments (cuda/row_sum_order.cuh), grown as f32_scratch is.
  float* sum_scratch(size_t n);
  float* grow_scratch(DeviceBuffer<float>& buf, size_t n, const char* what);
  void gelu_tanh_forward(const GeluArgs& a);
  void gelu_tanh_backward(const GeluBackwardArgs& a);
  void scale_c(const GemmArgs& g);  // k == 0: C = beta * C (ops_general.cu)
  // CUB's temporary storage for n pairs sorted on end_bit key bits (ops_embedding.cu: CUB is
  // compiled by nvcc only).
  static size_t sort_temp_bytes(int64_t n, int end_bit);

  // The general GEMM's handles and plans (ops_general.cpp).
  struct GemmPlans;
  struct GemmPlansDeleter {
    void operator()(GemmPlans* p) const;
  };
  static std::unique_ptr<GemmPlans, GemmPlansDeleter> make_gemm_plans(size_t workspace_bytes);

  cudaStream_t stream_;
  const WaitCheck* wait_check_;
  unsigned max_blocks_ = 1;  // cap of grid-stride grids (a few waves of the device)
  std::unique_ptr<LtGemm> lt_;  // the linear layers' GEMMs
  std::unique_ptr<GemmPlans, GemmPlansDeleter> plans_;
  DeviceBuffer<double> loss_partials_;
  DeviceBuffer<long long> hit_partials_;
  DeviceBuffer<float> gemm_scratch_, sum_scratch_;
  std::vector<DeviceBuffer<float>> retired_scratch_;
  bool warned_bias_ = false;
  bool exact_attention_ = false;
  // embedding_backward's sort (ops_embedding.cpp).
  int64_t max_tokens_ = 0, vocab_ = 0;
  DeviceBuffer<uint32_t> keys_in_, keys_out_;  // [max_tokens]
  DeviceBuffer<int32_t> vals_in_, vals_out_;   // [max_tokens]
  DeviceBuffer<unsigned char> sort_temp_;      // CUB's temporary storage
};

// Key bits of embedding_backward's sort: enough for 0..vocab (vocab marks out-of-range tokens).
inline int embedding_sort_bits(int64_t vocab) {
  int bits = 1;
  while (bits < 32 && (int64_t(1) << bits) <= vocab) ++bits;
  return bits;
}

}  // namespace amp::cuda
