// Matrix products on the CPU through oneDNN's matmul primitive (the library PyTorch's CPU path
// uses): f32 or bf16 operands, FP32 accumulation, optional bias added before the one rounding.
// Primitives are created once per shape and kept.
//
// Threads: where oneDNN runs a product A B or A B^T with its brgemm kernels, the rows of C are cut
// into one slice per OpenMP thread, each slice a single-threaded product (oneDNN's own threading
// of one product ran 1.10-1.25x slower at 2 threads than the halves side by side,
// docs/benchmarks.md); slices() says when. Each element of C is then the same dot over K whichever
// slice computes it, so the bits do not depend on the thread count (unit test "linear layers: the
// same bits at 1, 2 and 3 threads").
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
  // C[m,n] = op(A)[m,k] * op(B)[k,n] (+ bias[n]); all row-major. One caller at a time (the slices'
  // streams and scratchpads are the object's; CpuOps holds its lock); inside a parallel region the
  // product runs whole on the calling thread.
  void run(const MatmulShape& s, const void* a, const void* b, const void* bias, void* c);
  // How many row slices run() cuts a product into on `threads` threads (1: oneDNN threads it as
  // it chooses); slice i is rows [first_row(i), first_row(i + 1)), whole blocks of kSliceRows but
  // for the last.
  int slices(const MatmulShape& s, int threads);
  static size_t first_row(size_t m, int slices, int i);
  static constexpr size_t kSliceRows = 32;
  // Implementation oneDNN chose for a shape (e.g. "brg:avx512_core_bf16"), for benchmarks.
  std::string implementation(const MatmulShape& s);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace amp::cpu
