// The general ops of backend/ops_args.h on the CPU: a strided batched GEMM through oneDNN's matmul
// primitive (3-D memory descriptors: the batch dimension, transposes as strides, a stride-0
// operand as a batch dimension of 1, which oneDNN broadcasts; alpha as a run-time output scale,
// beta as a sum post-op), an elementwise add and a deterministic column sum, both OpenMP-parallel.
//
// oneDNN has no FP16 matmul on CPUs without AVX512-FP16, and BF16 only with AVX-512 (probed once,
// by creating a BF16 primitive, as CpuBackend does). Operands it cannot take are widened to FP32
// scratch (exact), the product runs in FP32 and C is rounded to its dtype once. The same path
// (every operand copied to dense FP32) serves layouts oneDNN refuses or would run only through its
// reference implementation.
//
// Primitives are cached per full signature (shape, leading dimensions, batch strides, dtypes, and
// whether beta is 0 and its value); alpha is a run-time argument. The calls are serialized by a
// mutex (the scratch buffers are shared); OpenMP threads are the caller's (omp_set_num_threads).
#pragma once

#include <memory>
#include <string>

#include "backend/ops_args.h"

namespace amp::cpu {

class GeneralOps {
 public:
  GeneralOps();
  ~GeneralOps();
  GeneralOps(const GeneralOps&) = delete;
  GeneralOps& operator=(const GeneralOps&) = delete;

  void gemm(const GemmArgs& g);
  void add(const AddArgs& a);
  void row_sum(const RowSumArgs& r);

  // Whether oneDNN multiplies BF16 operands natively on this CPU (else they are widened to FP32).
  bool bf16_native() const;
  // How gemm() runs these arguments: oneDNN's implementation name, followed by " (direct)" when it
  // reads and writes the caller's memory, or " (widened to f32)" when it goes through FP32 scratch.
  std::string gemm_implementation(const GemmArgs& g);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace amp::cpu
