#include "backend/cpu/no_fp_contract.h"  // first: no FMA contraction in this file

#include "backend/cpu/cpu_ops.h"

#include "backend/cpu/row_kernels.h"
#include "backend/cpu/transformer_rows.h"
#include "core/error.h"

namespace amp::cpu {

using namespace trows;

// GELU with the tanh approximation, forward and backward (transformer_args.h): blocks of elements
// in parallel, each through the widest kernels of row_kernels.h the CPU has (the scalar
// specification's bits); BF16 blocks through the set's BF16 kernels where it has them, else
// widened into a float block and rounded back.

void CpuOps::gelu_tanh_forward(const GeluArgs& a) {
  check_args(a);
  const RowKernels& kern = active_row_kernels();
  const bool bf16 = a.type == DType::BF16 && kern.gelu_forward_bf16;  // converting in the kernel's loop
  const int64_t n = a.n, nb = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t blk = 0; blk < nb; ++blk) {
    alignas(64) float buf[kBlock];
    const int64_t off = blk * kBlock, len = std::min(kBlock, n - off);
    if (bf16) {
      kern.gelu_forward_bf16(static_cast<const uint16_t*>(a.x) + off, static_cast<uint16_t*>(a.y) + off, len);
      continue;
    }
    const float* x = row_in(a.x, a.type, off, len, buf);  // FP32: read and written in place
    kern.gelu_forward(x, row_out(a.y, a.type, off, buf), len);
    row_store(buf, a.y, a.type, off, len);
  }
}

void CpuOps::gelu_tanh_backward(const GeluBackwardArgs& a) {
  check_args(a);
  const RowKernels& kern = active_row_kernels();
  const bool bf16 = a.type == DType::BF16 && kern.gelu_backward_bf16;
  const int64_t n = a.n, nb = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t blk = 0; blk < nb; ++blk) {
    alignas(64) float xbuf[kBlock], gbuf[kBlock];
    const int64_t off = blk * kBlock, len = std::min(kBlock, n - off);
    if (bf16) {
      kern.gelu_backward_bf16(static_cast<const uint16_t*>(a.x) + off, static_cast<const uint16_t*>(a.dy) + off,
                              static_cast<uint16_t*>(a.dx) + off, len);
      continue;
    }
    const float* x = row_in(a.x, a.type, off, len, xbuf);  // FP32: read and written in place
    const float* dy = row_in(a.dy, a.type, off, len, gbuf);
    kern.gelu_backward(x, dy, row_out(a.dx, a.type, off, gbuf), len);
    row_store(gbuf, a.dx, a.type, off, len);
  }
}

}  // namespace amp::cpu
