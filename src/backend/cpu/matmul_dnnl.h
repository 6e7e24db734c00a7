// Matrix products on the CPU through oneDNN's matmul primitive (the library PyTorch's CPU path
// uses): f32 or bf16 operands, FP32 accumulation, optional bias added before the one rounding.
// Primitives are created once per shape and kept.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "core/dtype.h"

namespace amp::cpu {

struct MatmulShape {
  size_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;  // A stored K x M / B stored N x K (row-major)
  DType ab = DType::F32, c = DType::F32, bias = DType::F32;
  bool has_bias = false;
  auto key() const { return std::make_tuple(m, n, k, trans_a, trans_b, int(ab), int(c), int(bias), has_bias); }
};

class DnnlMatmul {
 public:
  DnnlMatmul();
  ~DnnlMatmul();
  // C[m,n] = op(A)[m,k] * op(B)[k,n] (+ bias[n]); all row-major.
  void run(const MatmulShape& s, const void* a, const void* b, const void* bias, void* c);
  // Implementation oneDNN chose for a shape (e.g. "brg:avx512_core_bf16"), for benchmarks.
  std::string implementation(const MatmulShape& s);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace amp::cpu
