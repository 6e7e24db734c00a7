#include "backend/cpu/cpu_backend.h"

#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/kernels.h"
#include "core/convert.h"
#include "core/error.h"
#include "core/host_memory.h"

namespace amp {

CpuBackend::CpuBackend(int threads) : threads_(threads > 0 ? threads : 1) {
  omp_set_num_threads(threads_);
  // oneDNN runs BF16 matmuls natively only where the CPU has AVX-512 (BF16 or emulated); on an
  // AVX2-only CPU the operands are widened to FP32 like FP16's (exact: a BF16 is a truncated FP32).
  cpu::MatmulShape probe;
  probe.m = probe.n = probe.k = 1;
  probe.ab = probe.c = DType::BF16;
  try {
    matmul_.implementation(probe);
    bf16_native_ = true;
  } catch (const Error&) {
    bf16_native_ = false;
  }
}

std::string CpuBackend::name() const { return strcat("cpu (", threads_, threads_ == 1 ? " thread)" : " threads)"); }

Buffer CpuBackend::alloc(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded ? rounded : 64);
  if (!p) throw Error(ErrorKind::Internal, strcat("out of host memory allocating ", bytes, " bytes"));
  std::memset(p, 0, rounded);
  return Buffer(p, bytes, [](void* q) { std::free(q); });
}

size_t CpuBackend::memory_available(int ranks_on_node) const {
  // MemAvailable, shared by the node's ranks.
  return host_memory_available() / size_t(ranks_on_node > 0 ? ranks_on_node : 1);
}

void CpuBackend::upload(void* dst, const void* host_src, size_t bytes) { std::memcpy(dst, host_src, bytes); }
void CpuBackend::download(void* host_dst, const void* src, size_t bytes) { std::memcpy(host_dst, src, bytes); }
void CpuBackend::zero(void* dst, size_t bytes) { std::memset(dst, 0, bytes); }

void CpuBackend::cast(const void* src, DType src_type, void* dst, DType dst_type, size_t n) {
  convert_parallel(src, src_type, dst, dst_type, n);
}

float* CpuBackend::scratch(int slot, size_t n) {
  auto& v = scratch_[slot];
  if (v.size() < n) v.resize(n);
  return v.data();
}

void CpuBackend::gemm(const cpu::MatmulShape& s_in, const void* a, const void* b, const void* bias, void* c) {
  cpu::MatmulShape s = s_in;
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

void CpuBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  AMP_CHECK(x.cols == w.cols && y.rows == x.rows && y.cols == w.rows && b.numel() == w.rows,
            "linear_forward: shapes x ", x.rows, "x", x.cols, " w ", w.rows, "x", w.cols);
  cpu::MatmulShape s;
  s.m = x.rows, s.n = w.rows, s.k = x.cols;
  s.trans_b = true;
  s.ab = x.dtype, s.c = y.dtype, s.bias = b.dtype, s.has_bias = true;
  gemm(s, x.data, w.data, b.data, y.data);
}

void CpuBackend::linear_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx) {
  AMP_CHECK(dy.cols == w.rows && dx.rows == dy.rows && dx.cols == w.cols, "linear_backward_input: shapes");
  cpu::MatmulShape s;
  s.m = dy.rows, s.n = w.cols, s.k = dy.cols;
  s.ab = dy.dtype, s.c = dx.dtype;
  gemm(s, dy.data, w.data, nullptr, dx.data);
}

void CpuBackend::linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) {
  AMP_CHECK(dy.rows == x.rows && dw.rows == dy.cols && dw.cols == x.cols && db.numel() == dy.cols,
            "linear_backward_weight: shapes");
  cpu::MatmulShape s;
  s.m = dy.cols, s.n = x.cols, s.k = dy.rows;
  s.trans_a = true;
  s.ab = dy.dtype, s.c = dw.dtype;
  gemm(s, dy.data, x.data, nullptr, dw.data);
  cpu::bias_grad(dy, db);
}

void CpuBackend::activation_forward(Activation a, const Tensor& z, const Tensor& y) {
  if (a == Activation::GeluTanh) {
    AMP_CHECK(z.dtype == y.dtype && z.numel() == y.numel(), "gelu_tanh: shapes or dtypes differ");
    tops_.gelu_tanh_forward(GeluArgs{z.data, y.data, z.dtype, int64_t(z.numel())});
    return;
  }
  cpu::activation_forward(a, z, y);
}
void CpuBackend::activation_backward(Activation a, const Tensor& z, const Tensor& dy, const Tensor& dz) {
  if (a == Activation::GeluTanh) {
    AMP_CHECK(z.dtype == dy.dtype && dy.dtype == dz.dtype && z.numel() == dz.numel(), "gelu_tanh: shapes or dtypes differ");
    tops_.gelu_tanh_backward(GeluBackwardArgs{z.data, dy.data, dz.data, z.dtype, int64_t(z.numel())});
    return;
  }
  cpu::activation_backward(a, z, dy, dz);
}

void CpuBackend::softmax_xent(const SoftmaxXentArgs& a) {
  double loss = 0.0;
  int64_t hits = 0;
  cpu::softmax_xent(a, &loss, &hits);
  *a.loss_sum += float(loss);
  if (a.correct) *a.correct += int32_t(hits);
}

void CpuBackend::mse(const Tensor& pred, const Tensor& target, const float* scale, float inv_count,
                     const Tensor& dpred, float* loss_sum) {
  double loss = 0.0;
  cpu::mse(pred, target, *scale, inv_count, dpred, &loss);
  *loss_sum += float(loss);
}

void CpuBackend::find_nonfinite(const void* grads, DType dtype, const std::vector<TensorSpan>& spans, size_t begin,
                                size_t end, int32_t* flag) {
  const int32_t f = cpu::find_nonfinite(grads, dtype, spans, begin, end);
  if (f && (*flag == 0 || f < *flag)) *flag = f;
}

void CpuBackend::unscale_check(const void* grads, DType dtype, const std::vector<TensorSpan>& spans,
                               const float* scale, float* out32, int32_t* flags, float* norm_sq, int32_t* norm_bits) {
  double n2 = 0.0;
  const bool want = norm_sq || norm_bits;
  const int32_t f = cpu::unscale_check(grads, dtype, spans, *scale, out32, want ? &n2 : nullptr);
  flags[OverflowFlags::kReduced] = f;
  if (f) flags[OverflowFlags::kAny] = 1;
  if (norm_bits) store_norm_partial(norm_bits, n2);
  else if (norm_sq) *norm_sq = float(n2);
}

std::vector<GradStats> CpuBackend::grad_stats(const void* grads, DType dtype, const std::vector<TensorSpan>& spans) {
  return cpu::grad_stats(grads, dtype, spans);
}

void CpuBackend::optimizer_step(const OptimizerParams& p, const float* lr, float max_norm, float* master, const float* g32,
                                float* state1, float* state2, size_t n, void* lp, DType lp_dtype,
                                const int32_t* flags, const float* norm_sq, const ScalerState* scaler) {
  if (flags[OverflowFlags::kAny]) return;  // the coordinated skip: nothing changes
  const float grad_mul = max_norm > 0.0f ? clip_coefficient(max_norm, *norm_sq) : 1.0f;
  const StepScalars s = make_step_scalars(p, *lr, grad_mul, scaler->optimizer_steps + 1);
  cpu::optimizer_step(p, s, master, g32, state1, state2, n, lp, lp_dtype);
}

void CpuBackend::check_norm(const float* norm_sq, float max_norm, int32_t* flags) {
  flag_norm_overflow(flags, *norm_sq, max_norm);
}

void CpuBackend::sum_norm_partials(const int32_t* flags, int world, float* norm_sq) {
  *norm_sq = amp::sum_norm_partials(flags, world);
}

void CpuBackend::update_scale(ScalerState* state, const ScalerParams& params, const int32_t* flags, int world) {
  scaler_record_flags(*state, flags, world);
  scaler_update(*state, params, flags[OverflowFlags::kAny] != 0);
}

}  // namespace amp
