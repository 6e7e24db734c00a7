// Single-thread time of the CPU backend's streaming kernels (GELU, layer norm, the residual add,
// the overflow check with the gradient norm, the AdamW update) at a GPT step's sizes, each next to
// memcpy of the same number of bytes moved, timed alternately in the same run. Before every timed
// call a 64 MiB sweep pushes the operands out of L1 and L2, so they come from L3 or memory as in a
// step (where every op's input was written by an earlier op). A ratio near 1 is a kernel at the
// copy's bandwidth; above it, the kernel waits on its arithmetic or on memory it did not ask for
// early enough (core/prefetch.h).
// Usage: bench_stream [--rows 2048] [--width 384] [--params 10800000] [--samples 9]
// (defaults: the char shape of scripts/bench_gpt_shapes.sh, B x T = 2048 rows of width 384, the
// MLP's 4 x 384 columns, and that model's parameter count).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/row_kernels.h"
#include "core/convert.h"
#include "core/rng.h"
#include "optim/optimizer.h"
#include "optim/state_bytes.h"

namespace {

using Clock = std::chrono::steady_clock;
using amp::DType;

// Through a volatile pointer so the compiler can neither inline nor drop the copy.
void* (*volatile g_memcpy)(void*, const void*, size_t) = std::memcpy;

struct Sweep {
  std::vector<float> buf = std::vector<float>(size_t{16} << 20, 1.0f);  // 64 MiB
  void operator()() {
    for (size_t i = 0; i < buf.size(); i += 16) buf[i] += 1.0f;
  }
};

// Median seconds of fn() and of ref(), each call after a sweep, alternately.
std::pair<double, double> paired_median(const std::function<void()>& fn, const std::function<void()>& ref,
                                        int samples, Sweep& sweep) {
  std::vector<double> tf, tr;
  auto time = [&](const std::function<void()>& f) {
    sweep();
    const auto t0 = Clock::now();
    f();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  for (int s = -1; s < samples; ++s) {
    const double a = time(fn), b = time(ref);
    if (s >= 0) tf.push_back(a), tr.push_back(b);
  }
  std::sort(tf.begin(), tf.end());
  std::sort(tr.begin(), tr.end());
  return {tf[tf.size() / 2], tr[tr.size() / 2]};
}

std::vector<float> normals(size_t n, float sigma, uint64_t seed) {
  amp::Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(rng.normal()) * sigma;
  return v;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  amp::convert(v.data(), DType::F32, h.data(), DType::BF16, v.size());
  return h;
}

size_t arg(int argc, char** argv, const char* name, size_t def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::strtoull(argv[i + 1], nullptr, 10);
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; i += 2)
    if (i + 1 >= argc || (std::strcmp(argv[i], "--rows") && std::strcmp(argv[i], "--width") &&
                          std::strcmp(argv[i], "--params") && std::strcmp(argv[i], "--samples"))) {
      std::fprintf(stderr, "usage: %s [--rows 2048] [--width 384] [--params 10800000] [--samples 9]\n", argv[0]);
      return 2;
    }
  const size_t rows = arg(argc, argv, "--rows", 2048), C = arg(argc, argv, "--width", 384);
  const size_t P = arg(argc, argv, "--params", 10800000);
  const int samples = int(std::max<size_t>(1, arg(argc, argv, "--samples", 9)));
  if (rows == 0 || C == 0 || P == 0) {
    std::fprintf(stderr, "bench_stream: --rows, --width and --params must be positive\n");
    return 2;
  }
  omp_set_num_threads(1);
  amp::cpu::CpuOps ops;
  Sweep sweep;
  const size_t n = rows * 4 * C, nr = rows * C;  // the MLP's hidden activations; a residual row block

  std::vector<float> copy_a(std::max(3 * n, 7 * P)), copy_b(copy_a.size());
  std::printf("bench_stream: 1 thread, operands out of L2 (a 64 MiB sweep before each call), median of %d;\n",
              samples);
  std::printf("row kernels '%s', conversions '%s'; GELU on %zu x %zu, layer norm and add on %zu x %zu, %zu parameters\n\n",
              amp::cpu::active_row_kernels().isa, amp::active_convert_kernels().name.c_str(), rows, 4 * C, rows, C, P);
  std::printf("%-34s %10s %10s %10s %12s %10s\n", "kernel", "MiB moved", "ms", "GB/s", "memcpy ms", "x memcpy");
  auto report = [&](const char* name, double bytes, const std::function<void()>& fn) {
    const size_t half = size_t(bytes / 2);  // memcpy reads and writes half of the bytes each
    const auto [t, tc] = paired_median(fn, [&] { g_memcpy(copy_b.data(), copy_a.data(), half); }, samples, sweep);
    std::printf("%-34s %10.1f %10.3f %10.2f %12.3f %10.2f\n", name, bytes / 1048576.0, t * 1e3, bytes / t / 1e9,
                tc * 1e3, t / tc);
  };

  // GELU, forward and backward, FP32 and BF16 (x, dy and dx distinct: the backward in place would
  // multiply the same gradient again at every call, down into subnormals).
  const std::vector<float> x = normals(n, 1.5f, 1), dy = normals(n, 0.01f, 2);
  std::vector<float> y(n), dx(n);
  const std::vector<uint16_t> x16 = to_bf16(x), dy16 = to_bf16(dy);
  std::vector<uint16_t> y16(n), dx16(n);
  const int64_t ni = int64_t(n);
  report("gelu forward fp32", 8.0 * n, [&] { ops.gelu_tanh_forward({x.data(), y.data(), DType::F32, ni}); });
  report("gelu backward fp32", 12.0 * n,
         [&] { ops.gelu_tanh_backward({x.data(), dy.data(), dx.data(), DType::F32, ni}); });
  report("gelu forward bf16", 4.0 * n, [&] { ops.gelu_tanh_forward({x16.data(), y16.data(), DType::BF16, ni}); });
  report("gelu backward bf16", 6.0 * n,
         [&] { ops.gelu_tanh_backward({x16.data(), dy16.data(), dx16.data(), DType::BF16, ni}); });

  // Layer norm over rows of width C, forward (keeping mean and rstd) and backward.
  const std::vector<float> g = normals(C, 0.1f, 3), b = normals(C, 0.1f, 4);
  std::vector<float> mean(rows), rstd(rows), dg(C), db(C);
  amp::LayerNormArgs ln;
  ln.rows = int64_t(rows), ln.C = int64_t(C), ln.x = x.data(), ln.gamma = g.data(), ln.beta = b.data();
  ln.y = y.data(), ln.mean = mean.data(), ln.rstd = rstd.data();
  report("layernorm forward fp32", 8.0 * nr, [&] { ops.layernorm_forward(ln); });
  amp::LayerNormBackwardArgs lb;
  lb.rows = ln.rows, lb.C = ln.C, lb.dy = dy.data(), lb.x = x.data(), lb.gamma = g.data();
  lb.mean = mean.data(), lb.rstd = rstd.data(), lb.dx = dx.data(), lb.dgamma = dg.data(), lb.dbeta = db.data();
  report("layernorm backward fp32", 12.0 * nr, [&] { ops.layernorm_backward(lb); });

  // The residual add.
  amp::AddArgs add;
  add.a = x.data(), add.b = dy.data(), add.out = y.data(), add.n = int64_t(nr);
  report("add fp32", 12.0 * nr, [&] { ops.add(add); });

  // The overflow check with the gradient norm over every parameter's gradient, as the step's
  // check+norm, in FP32 and in BF16.
  const std::vector<float> grads = normals(P, 1e-3f, 5);
  const std::vector<uint16_t> grads16 = to_bf16(grads);
  const std::vector<amp::TensorSpan> spans{{0, P}};
  double norm_sq = 0.0;
  report("check+norm fp32", 4.0 * P,
         [&] { amp::cpu::unscale_check(grads.data(), DType::F32, spans, 1024.0f, nullptr, &norm_sq); });
  report("check+norm bf16", 2.0 * P,
         [&] { amp::cpu::unscale_check(grads16.data(), DType::BF16, spans, 1024.0f, nullptr, &norm_sq); });

  // AdamW over every parameter, the gradient unscaled into FP32 first as the trainer does, a pass
  // at a time (TrainStep::optimizer_range: the CPU backend's pass_elements at 1 thread): reads g,
  // w, m, v, writes w, m, v.
  std::vector<float> w = normals(P, 0.02f, 6), m(P, 0.0f), v(P, 0.0f),
                     g32(amp::unscale_pass(std::min(P, amp::unscale_chunk(size_t{25} << 20)), amp::CpuBackend(1).pass_elements()));
  const amp::OptimizerParams op;
  const amp::StepScalars st{1e-4f, 1.0f, 1e-3f, 0.03f};
  report("adamw fp32 (+unscale)", 28.0 * P, [&] {
    for (size_t c0 = 0; c0 < P; c0 += g32.size()) {
      const size_t len = std::min(g32.size(), P - c0);
      amp::cpu::unscale(grads.data() + c0, DType::F32, len, 1.0f, g32.data());
      amp::cpu::optimizer_step(op, st, w.data() + c0, g32.data(), m.data() + c0, v.data() + c0, len, nullptr,
                               DType::F32);
    }
  });
  std::printf("\n(bytes moved: each input read and each output written once; the unscaled gradient's\n"
              "FP32 chunk, written and read back in the caches, is not counted)\n");
  return 0;
}
