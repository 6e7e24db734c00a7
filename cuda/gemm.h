// Matrix products through cuBLASLt: 16-bit (or f32) operands, FP32 accumulation (CUBLAS_COMPUTE_32F),
// output in D's dtype, optional bias added by the epilogue before the one rounding (split-K
// reductions restricted to none or FP32 partials: set_preferences, cublaslt_util.h). Plans
// (descriptors, layouts and the algorithm the heuristic picked) are cached per shape, dtype and
// pointer alignment; the workspace is allocated once, so a call allocates nothing and can be
// captured into a CUDA graph.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "backend/ops_args.h"
#include "backend/tensor.h"
#include "core/dtype.h"
#include "cudart/device_buffer.h"

namespace amp::cuda {

// D = op(A) * op(B) (+ bias broadcast along D's columns), all column-major as cuBLAS sees them:
// op(A) is m x k, op(B) is k x n, D is m x n with leading dimension ldd; bias has m elements of
// D's dtype. A is stored k x m when trans_a (m x k otherwise), B is stored n x k when trans_b.
struct GemmCall {
  bool trans_a = false, trans_b = false;
  uint64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* d = nullptr;
  int64_t ldd = 0;
  DType ab = DType::F32;  // A's and B's dtype
  DType dt = DType::F32;  // D's dtype
  const void* bias = nullptr;
};

// The row-major linear layers as column-major GEMMs (see gemm.cpp for the derivation). The bias
// is left out; linear_forward_call's caller sets it when the epilogue applies.
GemmCall linear_forward_call(const Tensor& x, const Tensor& w, const Tensor& y);        // y = x w^T
GemmCall linear_backward_input_call(const Tensor& dy, const Tensor& w, const Tensor& dx);  // dx = dy w
GemmCall linear_backward_weight_call(const Tensor& dy, const Tensor& x, const Tensor& dw);  // dw = dy^T x

class LtGemm {
 public:
  explicit LtGemm(size_t workspace_bytes);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  void run(const GemmCall& c, cudaStream_t stream);
  // False when cuBLASLt has no algorithm for this call (remembered; nothing is enqueued).
  bool supported(const GemmCall& c);

  // The FP8 GEMM of backend/ops_args.h (Fp8GemmArgs) on FP8 tensor cores (sm_89 and later): row-major
  // C = A B^T / (sa sb) + bias is, column-major, C^T = B A^T: cuBLASLt's A is our B (transposed,
  // k-contiguous), its B our A, and its scale pointers our inverse scales (copied to 16-byte
  // aligned slots where they are not: cuBLASLt refuses unaligned ones). Through this class the
  // FP8 GEMM has failed on an H200 for that reason; the fix has run only in
  // bench/gpu/probe_fp8_gemm.cpp's form so far.
  bool supported_fp8(const Fp8GemmArgs& g);
  void run_fp8(const Fp8GemmArgs& g, cudaStream_t stream);

 private:
  struct Plan;
  using Key = std::tuple<bool, bool, uint64_t, uint64_t, uint64_t, int64_t, int64_t, int64_t, int, int, bool,
                         uint32_t, uint32_t, uint32_t, uint32_t>;
  Key key_of(const GemmCall& c) const;
  Plan* find_plan(const GemmCall& c, std::string* why);  // nullptr (and why) when there is none
  bool pick_algorithm(Plan& p, uint32_t align_a, uint32_t align_b, uint32_t align_d, std::string* why);
  Plan& plan_for(const GemmCall& c);                     // throws when there is none
  using Fp8Key = std::tuple<int64_t, int64_t, int64_t, int, int, int, bool, uint32_t, uint32_t, uint32_t>;
  Plan* find_fp8_plan(const Fp8GemmArgs& g, std::string* why);
  const float* aligned_scale(const float* scale, int slot, cudaStream_t stream);

  CublasLtHandle handle_;
  DeviceBuffer<unsigned char> workspace_;
  DeviceBuffer<float> scale_slots_;  // aligned copies of the FP8 GEMM's scales (slots 16 bytes apart)
  std::map<Key, std::unique_ptr<Plan>> plans_;  // a null entry: no algorithm
  std::map<Fp8Key, std::unique_ptr<Plan>> fp8_plans_;
};

}  // namespace amp::cuda
