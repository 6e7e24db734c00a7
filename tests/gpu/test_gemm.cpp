// The linear layers (on CUDA: cuBLASLt GEMMs with the bias epilogue, the bias gradient) against the
// CPU backend for f32, f16 and bf16 operands (and f32 output from 16-bit operands) on odd shapes, with
// the weights at the 32-element offsets the parameter layout gives them.
#include "device_raw.h"

using namespace amp;
using namespace gpu_test;

namespace {

// Elementwise within one rounding of the output dtype plus a small absolute term (FP32
// accumulation order differs), and a normalized squared error far below one rounding.
void check_gemm_output(const std::vector<float>& g, const std::vector<float>& c, DType out, size_t k) {
  const double eps = out == DType::F32 ? 1e-6 * std::sqrt(double(k)) : eps_of(out);
  const double scale = max_abs(c);
  GPU_REQUIRE_CLOSE(g, c, 2 * eps, 2 * eps * scale);
  double num = 0, den = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    num += (double(g[i]) - c[i]) * (double(g[i]) - c[i]);
    den += double(c[i]) * c[i];
  }
  INFO("normalized squared error " << num / std::max(den, 1e-30));
  CHECK(num <= 4 * eps * eps * std::max(den, 1e-30));
}

struct Shape {
  size_t batch, in, out;
};

}  // namespace

TEST_CASE("linear forward, backward input and backward weight match the CPU", "[.cuda][gemm]") {
  auto gpu = make_device();
  CpuBackend cpu(2);
  const Shape shapes[] = {{1, 1, 1}, {3, 5, 7}, {37, 129, 65}, {64, 33, 31}, {257, 1024, 10}, {128, 784, 1024}};
  struct Types {
    DType ab, out;
  };
  const Types types[] = {{DType::F32, DType::F32},
                         {DType::F16, DType::F16},
                         {DType::BF16, DType::BF16},
                         {DType::F16, DType::F32},
                         {DType::BF16, DType::F32}};
  uint64_t seed = 100;
  for (const Shape& s : shapes) {
    for (const Types& t : types) {
      INFO("batch " << s.batch << " in " << s.in << " out " << s.out << " operands " << dtype_name(t.ab)
                    << " output " << dtype_name(t.out));
      const std::vector<float> x = randn(s.batch * s.in, ++seed), w = randn(s.out * s.in, ++seed, 1.0 / std::sqrt(s.in));
      const std::vector<float> b = randn(s.out, ++seed), dy = randn(s.batch * s.out, ++seed);
      // Weights and bias 32 elements into their buffers (64/128-byte alignment, as in the layout).
      Mirror X(cpu, *gpu, x, t.ab, s.batch, s.in), W(cpu, *gpu, w, t.ab, s.out, s.in, 32);
      // A bias of the output's dtype uses the epilogue; a 16-bit bias with f32 output the f32 add.
      Mirror B(cpu, *gpu, b, t.ab, 1, s.out, 32);
      Mirror DY(cpu, *gpu, dy, t.ab, s.batch, s.out);
      Mirror Y = Mirror::output(cpu, *gpu, t.out, s.batch, s.out), DX = Mirror::output(cpu, *gpu, t.out, s.batch, s.in);
      Mirror DW = Mirror::output(cpu, *gpu, t.out, s.out, s.in), DB = Mirror::output(cpu, *gpu, t.ab, 1, s.out);

      cpu.ops().linear_forward(X.c, W.c, B.c, Y.c);
      gpu->ops().linear_forward(X.g, W.g, B.g, Y.g);
      check_gemm_output(read(*gpu, Y.g), read(cpu, Y.c), t.out, s.in);

      cpu.ops().linear_backward_input(DY.c, W.c, DX.c);
      gpu->ops().linear_backward_input(DY.g, W.g, DX.g);
      check_gemm_output(read(*gpu, DX.g), read(cpu, DX.c), t.out, s.out);

      cpu.ops().linear_backward_weight(DY.c, X.c, DW.c, DB.c);
      gpu->ops().linear_backward_weight(DY.g, X.g, DW.g, DB.g);
      check_gemm_output(read(*gpu, DW.g), read(cpu, DW.c), t.out, s.batch);
      check_gemm_output(read(*gpu, DB.g), read(cpu, DB.c), t.ab, s.batch);
    }
  }
}

TEST_CASE("linear layers on row slices of a larger batch buffer (evaluation batches)", "[.cuda][gemm]") {
  auto gpu = make_device();
  CpuBackend cpu(2);
  const size_t max_batch = 100, batch = 61, in = 96, out = 40;
  const std::vector<float> x = randn(max_batch * in, 7), w = randn(out * in, 8, 0.1), b = randn(out, 9);
  Mirror X(cpu, *gpu, x, DType::F16, max_batch, in), W(cpu, *gpu, w, DType::F16, out, in, 32);
  Mirror B(cpu, *gpu, b, DType::F16, 1, out);
  Mirror Y = Mirror::output(cpu, *gpu, DType::F16, max_batch, out);
  cpu.ops().linear_forward(X.c.row_slice(0, batch), W.c, B.c, Y.c.row_slice(0, batch));
  gpu->ops().linear_forward(X.g.row_slice(0, batch), W.g, B.g, Y.g.row_slice(0, batch));
  const std::vector<float> yc = read(cpu, Y.c), yg = read(*gpu, Y.g);
  check_gemm_output(yg, yc, DType::F16, in);
  for (size_t i = batch * out; i < max_batch * out; ++i) REQUIRE(yg[i] == 0.0f);  // rows past the slice untouched
}

TEST_CASE("linear forward without the bias epilogue (a bias below 16-byte alignment) still rounds once",
          "[.cuda][gemm]") {
  auto gpu = make_device();
  CpuBackend cpu(2);
  const Shape shapes[] = {{3, 5, 7}, {37, 129, 65}, {257, 1024, 10}};
  uint64_t seed = 500;
  for (const Shape& s : shapes) {
    for (DType t : {DType::F16, DType::BF16}) {
      INFO("batch " << s.batch << " in " << s.in << " out " << s.out << " " << dtype_name(t));
      const std::vector<float> x = randn(s.batch * s.in, ++seed), w = randn(s.out * s.in, ++seed, 1.0 / std::sqrt(s.in));
      const std::vector<float> b = randn(s.out, ++seed);
      Mirror X(cpu, *gpu, x, t, s.batch, s.in), W(cpu, *gpu, w, t, s.out, s.in, 32);
      Mirror B(cpu, *gpu, b, t, 1, s.out, 1);  // one element in: 2-byte alignment, no epilogue
      Mirror Y = Mirror::output(cpu, *gpu, t, s.batch, s.out);
      cpu.ops().linear_forward(X.c, W.c, B.c, Y.c);
      gpu->ops().linear_forward(X.g, W.g, B.g, Y.g);
      check_gemm_output(read(*gpu, Y.g), read(cpu, Y.c), t, s.in);
    }
  }
}

TEST_CASE("linear weight gradient over a long batch rounds its 16-bit output once", "[.cuda][gemm]") {
  // dw = dy^T x summed over 8192 rows: the shape where a split-K algorithm would add partial sums
  // in the output's dtype (rounding more than once) unless the heuristic is told not to.
  auto dev = make_device();
  for (DType t : {DType::F16, DType::BF16}) {
    INFO(dtype_name(t));
    const int64_t batch = 8192, in = 24, out = 16;
    const auto cs = ops_ref::make_gemm_case(out, in, batch, 1, true, false, t, t, 1.0f, 0.0f, {}, 77);
    Dev dy(*dev, cs.a), x(*dev, cs.b), dw(*dev, cs.c0);
    Buffer db = dev->memory().alloc(size_t(out) * dtype_size(t));
    dev->ops().linear_backward_weight(Tensor{dy.get(), t, size_t(batch), size_t(out)}, Tensor{x.get(), t, size_t(batch), size_t(in)},
                                Tensor{dw.get(), t, size_t(out), size_t(in)}, Tensor{db.data(), t, 1, size_t(out)});
    OPS_REQUIRE_GEMM(cs, dw.read(t), 4.0);  // the bound of test_ops_general.cpp's device GEMMs
  }
}
