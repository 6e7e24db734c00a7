#include "backend/cpu/cpu_ops.h"

#include <mutex>

#include "backend/cpu/kernels.h"
#include "backend/cpu/row_kernels.h"
#include "core/convert.h"
#include "core/error.h"

namespace amp::cpu {

CpuOps::CpuOps() : plans_(make_gemm_plans()) {
  // oneDNN runs BF16 matmuls natively only where the CPU has AVX-512 (BF16 or emulated); on an
  // AVX2-only CPU the operands are widened to FP32 like FP16's (exact: a BF16 is a truncated FP32).
  MatmulShape probe;
  probe.m = probe.n = probe.k = 1;
  probe.ab = probe.c = DType::BF16;
  try {
    matmul_.implementation(probe);
    bf16_native_ = true;
  } catch (const Error&) {
    bf16_native_ = false;
  }
  // The fused attention's BF16 matmul path where oneDNN runs a tile's score product on AMX: there
  // it is 1.1-1.6x faster than the specification's kernels; on AVX-512-BF16 without AMX (oneDNN
  // capped to it on an AMX CPU) it was 1.2-1.4x slower (docs/benchmarks.md). Its rows need the
  // kernel set's BF16 softmax rows (AVX-512, which every AMX CPU has).
  if (bf16_native_ && active_row_kernels().softmax_forward_bf16) {
    MatmulShape tile;
    tile.m = 64, tile.n = 256, tile.k = 64, tile.trans_b = true;
    tile.ab = DType::BF16, tile.c = DType::F32;
    attention_matmul_ = matmul_.implementation(tile).find("amx") != std::string::npos;
  }
}

CpuOps::~CpuOps() = default;

void CpuOps::cast(const void* src, DType src_type, void* dst, DType dst_type, size_t n) {
  convert_parallel(src, src_type, dst, dst_type, n);
}

float* CpuOps::scratch(int slot, size_t n) {
  auto& v = scratch_[slot];
  if (v.size() < n) v.resize(n);
  return v.data();
}

void CpuOps::linear_gemm(const MatmulShape& s_in, const void* a, const void* b, const void* bias, void* c) {
  MatmulShape s = s_in;
  std::lock_guard<std::mutex> lock(linear_mu_);  // the scratch buffers
  const auto widened = [&](DType t) { return t == DType::F16 || (t == DType::BF16 && !bf16_native_); };
  if (!widened(s.ab) && !widened(s.c) && !(s.has_bias && widened(s.bias))) {
    matmul_.run(s, a, b, bias, c);
    return;
  }
  // Widen the 16-bit operands oneDNN cannot take (exact), multiply in FP32, round the result once.
  const size_t na = s.m * s.k, nb = s.k * s.n, nc = s.m * s.n;
  const void* a32 = a;
  const void* b32 = b;
  const void* bias32 = bias;
  if (widened(s.ab)) {
    float* fa = scratch(0, na);
    float* fb = scratch(1, nb);
    convert_parallel(a, s.ab, fa, DType::F32, na);
    convert_parallel(b, s.ab, fb, DType::F32, nb);
    a32 = fa;
    b32 = fb;
    s.ab = DType::F32;
  }
  if (s.has_bias && widened(s.bias)) {
    float* fbias = scratch(2, s.n);
    convert(bias, s.bias, fbias, DType::F32, s.n);
    bias32 = fbias;
    s.bias = DType::F32;
  }
  const DType out = s.c;
  s.c = DType::F32;
  float* fc = out == DType::F32 ? static_cast<float*>(c) : scratch(3, nc);
  matmul_.run(s, a32, b32, bias32, fc);
  if (out != DType::F32) convert_parallel(fc, DType::F32, c, out, nc);
}

void CpuOps::linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  AMP_CHECK(x.cols == w.cols && y.rows == x.rows && y.cols == w.rows && b.numel() == w.rows,
            "linear_forward: shapes x ", x.rows, "x", x.cols, " w ", w.rows, "x", w.cols);
  MatmulShape s;
  s.m = x.rows, s.n = w.rows, s.k = x.cols;
  s.trans_b = true;
  s.ab = x.dtype, s.c = y.dtype, s.bias = b.dtype, s.has_bias = true;
  linear_gemm(s, x.data, w.data, b.data, y.data);
}

void CpuOps::linear_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx) {
  AMP_CHECK(dy.cols == w.rows && dx.rows == dy.rows && dx.cols == w.cols, "linear_backward_input: shapes");
  MatmulShape s;
  s.m = dy.rows, s.n = w.cols, s.k = dy.cols;
  s.ab = dy.dtype, s.c = dx.dtype;
  linear_gemm(s, dy.data, w.data, nullptr, dx.data);
}

void CpuOps::linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) {
  AMP_CHECK(dy.rows == x.rows && dw.rows == dy.cols && dw.cols == x.cols && db.numel() == dy.cols,
            "linear_backward_weight: shapes");
  MatmulShape s;
  s.m = dy.cols, s.n = x.cols, s.k = dy.rows;
  s.trans_a = true;
  s.ab = dy.dtype, s.c = dw.dtype;
  linear_gemm(s, dy.data, x.data, nullptr, dw.data);
  cpu::bias_grad(dy, db);
}

void CpuOps::activation_forward(Activation a, const Tensor& z, const Tensor& y) {
  if (a == Activation::GeluTanh) {
    AMP_CHECK(z.dtype == y.dtype && z.numel() == y.numel(), "gelu_tanh: shapes or dtypes differ");
    gelu_tanh_forward(GeluArgs{z.data, y.data, z.dtype, int64_t(z.numel())});
    return;
  }
  cpu::activation_forward(a, z, y);
}

void CpuOps::activation_backward(Activation a, const Tensor& z, const Tensor& dy, const Tensor& dz) {
  if (a == Activation::GeluTanh) {
    AMP_CHECK(z.dtype == dy.dtype && dy.dtype == dz.dtype && z.numel() == dz.numel(), "gelu_tanh: shapes or dtypes differ");
    gelu_tanh_backward(GeluBackwardArgs{z.data, dy.data, dz.data, z.dtype, int64_t(z.numel())});
    return;
  }
  cpu::activation_backward(a, z, dy, dz);
}

void CpuOps::softmax_xent(const SoftmaxXentArgs& a) {
  double loss = 0.0;
  int64_t hits = 0;
  cpu::softmax_xent(a, &loss, &hits);
  *a.loss_sum += float(loss);
  if (a.correct) *a.correct += int32_t(hits);
}

void CpuOps::mse(const Tensor& pred, const Tensor& target, const float* scale, float inv_count, const Tensor& dpred,
                 float* loss_sum) {
  double loss = 0.0;
  cpu::mse(pred, target, *scale, inv_count, dpred, &loss);
  *loss_sum += float(loss);
}

}  // namespace amp::cpu
