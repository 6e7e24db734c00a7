// The general ops of backend/ops_args.h on a CUDA stream, the twins of amp::cpu::GeneralOps.
//
// gemm: cuBLASLt with strided-batched matrix layouts (CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
//   CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET), CUBLAS_COMPUTE_32F (no TF32). Row-major is
//   expressed as the column-major transpose: C^T = op(B)^T op(A)^T, so cuBLAS's A is our B and
//   its B our A. Plans (descriptors, layouts, the heuristic's algorithm) are cached per signature
//   (shape, leading dimensions, batch strides, dtypes, pointer alignments); split-K reductions are
//   restricted to none or FP32 workspace partials, so C is rounded once. Where cuBLASLt has no
//   algorithm (unusual leading dimensions or alignments) the call goes to
//   cublasGemmStridedBatchedEx with the same mapping, math mode forbidding reduced-precision
//   reductions. k == 0 runs a small kernel (C = beta * C).
// add, row_sum: kernels in ops_general.cu, bit-identical to the CPU twins (row_sum: one thread
//   block per 32-column tile with kRowSumLanes row lanes, the fixed order of ops_args.h).
//
// Every call only enqueues work on the given stream (no allocation after the first call of a
// signature, no host synchronization), so calls can be captured into a CUDA graph once each
// signature has been run (or planned with gemm_path) outside the capture. The workspace is
// allocated once and shared by all calls: calls on different streams must not run concurrently
// (use one GeneralOps per stream). The plan cache is guarded by a mutex.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>

#include "backend/ops_args.h"

namespace amp::cuda {

class GeneralOps {
 public:
  static constexpr size_t kDefaultWorkspaceBytes = size_t(32) << 20;  // 32 MiB (suits Hopper)

  // Uses the current CUDA device; creates the cuBLAS(Lt) handles and allocates the workspace.
  explicit GeneralOps(size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~GeneralOps();
  GeneralOps(const GeneralOps&) = delete;
  GeneralOps& operator=(const GeneralOps&) = delete;

  void gemm(const GemmArgs& g, cudaStream_t stream);
  void add(const AddArgs& a, cudaStream_t stream);
  void row_sum(const RowSumArgs& r, cudaStream_t stream);

  // Plans the GEMM without running it and says which library runs it: "cublasLt", "cublas"
  // (cuBLASLt had no algorithm) or "kernel" (k == 0) / "none" (empty). For tests, benchmarks and
  // planning ahead of a graph capture.
  std::string gemm_path(const GemmArgs& g);
  // Tests: send every GEMM to the cublasGemmStridedBatchedEx path.
  void set_force_cublas(bool on);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  unsigned max_blocks_ = 1;  // cap of grid-stride grids (a few waves of the device)

  // k == 0: C = beta * C (beta == 0: zeros), in ops_general.cu.
  void scale_c(const GemmArgs& g, cudaStream_t stream);
};

}  // namespace amp::cuda
