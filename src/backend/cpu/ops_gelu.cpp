#include "backend/cpu/no_fp_contract.h"  // first: no FMA contraction in this file

#include "backend/cpu/cpu_ops.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cpu/row_kernels.h"
#include "backend/cpu/transformer_rows.h"
#include "core/error.h"

namespace amp::cpu {

using namespace trows;

// GELU with the tanh approximation, forward and backward (transformer_args.h): blocks of elements
// in parallel. FP32 blocks go through the widest kernels of row_kernels.h the CPU has (the scalar
// specification's bits). A 16-bit x has only 65536 values, so for BF16 and FP16 the op looks its
// results up: per type, once per process, the table of the specification's gelu(x) rounded to the
// type and of gelu'(x) in FP32 for every bit pattern of x (those kernels on the widened patterns).
// The forward is then one load per element, the backward one load and one product (dy widened,
// times gelu'(x), rounded once): the bits of widening, the FP32 kernels and rounding, at 1.6-1.8x
// their speed (docs/benchmarks.md). For BF16 where the CPU has AVX-512F the backward's chunks
// widen, multiply and round in registers (RowKernels::gelu_backward_bf16_table). Every pattern of
// both types is checked against the scalar specification by tests/unit/test_ops_transformer.cpp.

namespace {

struct GeluTable {
  std::vector<uint16_t> y;  // [65536] gelu(x) in the type
  std::vector<float> grad;  // [65536] gelu'(x)
};

GeluTable make_table(DType type) {
  const size_t n = 65536;
  std::vector<uint16_t> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = uint16_t(i);
  std::vector<float> xf(n), yf(n), ones(n, 1.0f);
  convert(x.data(), type, xf.data(), DType::F32, n);
  const RowKernels& kern = active_row_kernels();
  GeluTable t{std::vector<uint16_t>(n), std::vector<float>(n)};
  kern.gelu_forward(xf.data(), yf.data(), int64_t(n));
  convert(yf.data(), DType::F32, t.y.data(), type, n);
  kern.gelu_backward(xf.data(), ones.data(), t.grad.data(), int64_t(n));  // 1 * gelu'(x): gelu'(x)'s bits
  return t;
}

const GeluTable& gelu_table(DType type) {
  static const GeluTable bf16 = make_table(DType::BF16), f16 = make_table(DType::F16);
  return type == DType::BF16 ? bf16 : f16;
}

bool is_16bit(DType type) { return type == DType::BF16 || type == DType::F16; }

// y[i] = table(x[i]); y may be x.
void forward_16(const GeluTable& t, const uint16_t* x, uint16_t* y, int64_t n) {
  const uint16_t* tab = t.y.data();
  for (int64_t i = 0; i < n; ++i) y[i] = tab[x[i]];
}

// dx[i] = round(widen(dy[i]) * gelu'(x[i])) in chunks on the stack; dx may be dy or x (each chunk
// is read whole before it is written).
void backward_16(const GeluTable& t, DType type, const uint16_t* x, const uint16_t* dy, uint16_t* dx, int64_t n) {
  constexpr int64_t kChunk = 512;
  alignas(64) float g[kChunk], d[kChunk];
  const float* grad = t.grad.data();
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t len = std::min(kChunk, n - c);
    for (int64_t i = 0; i < len; ++i) g[i] = grad[x[c + i]];
    convert(dy + c, type, d, DType::F32, size_t(len));
    for (int64_t i = 0; i < len; ++i) d[i] = d[i] * g[i];  // the FP32 kernels' dy * gelu'(x)
    convert(d, DType::F32, dx + c, type, size_t(len));
  }
}

// fn(offset, length) for each block of kBlock elements of n, in parallel where n is large enough.
template <typename F>
void for_blocks(int64_t n, const F& fn) {
  const int64_t nb = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t blk = 0; blk < nb; ++blk) fn(blk * kBlock, std::min(kBlock, n - blk * kBlock));
}

}  // namespace

void CpuOps::gelu_tanh_forward(const GeluArgs& a) {
  check_args(a);
  if (is_16bit(a.type)) {
    const GeluTable& t = gelu_table(a.type);
    const auto* x = static_cast<const uint16_t*>(a.x);
    auto* y = static_cast<uint16_t*>(a.y);
    for_blocks(a.n, [&](int64_t off, int64_t len) { forward_16(t, x + off, y + off, len); });
    return;
  }
  const RowKernels& kern = active_row_kernels();  // FP32: y may be x
  const auto* x = static_cast<const float*>(a.x);
  auto* y = static_cast<float*>(a.y);
  for_blocks(a.n, [&](int64_t off, int64_t len) { kern.gelu_forward(x + off, y + off, len); });
}

void CpuOps::gelu_tanh_backward(const GeluBackwardArgs& a) {
  check_args(a);
  if (is_16bit(a.type)) {
    const GeluTable& t = gelu_table(a.type);
    const auto* x = static_cast<const uint16_t*>(a.x);
    const auto* dy = static_cast<const uint16_t*>(a.dy);
    auto* dx = static_cast<uint16_t*>(a.dx);
    const auto bf16 = a.type == DType::BF16 ? active_row_kernels().gelu_backward_bf16_table : nullptr;
    for_blocks(a.n, [&](int64_t off, int64_t len) {
      if (bf16)  // the same product and rounding in one pass (row_kernels.h)
        bf16(t.grad.data(), x + off, dy + off, dx + off, len);
      else
        backward_16(t, a.type, x + off, dy + off, dx + off, len);
    });
    return;
  }
  const RowKernels& kern = active_row_kernels();  // FP32: dx may be dy or x
  const auto* x = static_cast<const float*>(a.x);
  const auto* dy = static_cast<const float*>(a.dy);
  auto* dx = static_cast<float*>(a.dx);
  for_blocks(a.n, [&](int64_t off, int64_t len) { kern.gelu_backward(x + off, dy + off, dx + off, len); });
}

}  // namespace amp::cpu
