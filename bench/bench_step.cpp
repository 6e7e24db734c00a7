// Where a training step's time goes on the CPU backend, next to oneDNN's bare matmul on the same
// shapes and dtype measured in the same run. Usage:
//   bench_step [--dims 784,1024,1024,10] [--batch 128] [--precision bf16] [--threads 1] [--steps 50]
// Prints per-phase milliseconds, the step's FLOP rate and its ratio to the bare GEMM rate.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "step_phases.h"
#include "backend/cpu/cpu_backend.h"
#include "core/rng.h"
#include "model/mlp.h"

using namespace amp;

namespace {

using bench::now;

std::vector<size_t> parse_dims(const char* s) {
  std::vector<size_t> d;
  for (const char* p = s; *p;) {
    d.push_back(std::strtoul(p, const_cast<char**>(&p), 10));
    if (*p == ',') ++p;
  }
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> dims{784, 1024, 1024, 10};
  size_t batch = 128, steps = 50;
  int threads = 1;
  std::string prec = "bf16";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--dims") dims = parse_dims(argv[i + 1]);
    else if (a == "--batch") batch = std::strtoul(argv[i + 1], nullptr, 10);
    else if (a == "--precision") prec = argv[i + 1];
    else if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--steps") steps = std::strtoul(argv[i + 1], nullptr, 10);
  }
  const DType dt = prec == "fp32" ? DType::F32 : prec == "fp16" ? DType::F16 : DType::BF16;
  CpuBackend be(threads);
  MlpOptions mo;
  mo.dims = dims;
  Mlp model(be.memory(), be.ops(), mo, dt, batch);
  // One seeded batch, staged once (the host gathering is not part of the device step).
  Dataset data;
  data.n = batch;
  data.n_features = dims[0];
  data.n_classes = int(dims.back());
  Rng rng(2);
  data.x.resize(batch * dims[0]);
  for (auto& x : data.x) x = float(rng.normal());
  data.labels.resize(batch);
  for (auto& l : data.labels) l = int32_t(rng.below(dims.back()));
  model.stage(data, nullptr, 0, batch);
  bench::StepPhases phases(be, model, dt, 65536.0f);
  const double step = phases.run(batch, 1.0f / float(batch), 5, steps);

  // Bare GEMMs of the same shapes and dtype, as the backend runs them: FP16 (and BF16 where oneDNN
  // has no BF16 matmul on this CPU) as FP32 matmuls of widened operands.
  const bool widened = dt == DType::F16 || (dt == DType::BF16 && !be.cpu_ops().bf16_native());
  const DType gemm_t = widened ? DType::F32 : dt;
  if (dt == DType::BF16 && widened) std::printf("bf16: no oneDNN BF16 matmul on this CPU: operands widened to FP32\n");
  std::vector<cpu::MatmulShape> shapes;
  double flops = 0;
  for (size_t l = 0; l + 1 < dims.size(); ++l) {
    const size_t in = dims[l], out = dims[l + 1];
    cpu::MatmulShape f;
    f.m = batch, f.n = out, f.k = in, f.trans_b = true, f.ab = gemm_t, f.c = gemm_t, f.bias = gemm_t, f.has_bias = true;
    cpu::MatmulShape bw;
    bw.m = out, bw.n = in, bw.k = batch, bw.trans_a = true, bw.ab = gemm_t, bw.c = gemm_t;
    shapes.push_back(f);
    shapes.push_back(bw);
    flops += 4.0 * double(batch * in * out);
    if (l > 0) {
      cpu::MatmulShape bi;
      bi.m = batch, bi.n = in, bi.k = out, bi.ab = gemm_t, bi.c = gemm_t;
      shapes.push_back(bi);
      flops += 2.0 * double(batch * in * out);
    }
  }
  double bare = 0;
  for (const auto& sh : shapes) {
    const size_t ea = sh.m * sh.k, eb = sh.k * sh.n, ec = sh.m * sh.n;
    Buffer a = be.memory().alloc(ea * 4), b = be.memory().alloc(eb * 4), c = be.memory().alloc(ec * 4), bias = be.memory().alloc(sh.n * 4);
    std::vector<double> times;
    for (size_t r = 0; r < steps + 5; ++r) {
      const double t0 = now();
      be.cpu_ops().matmul().run(sh, a.data(), b.data(), bias.data(), c.data());
      if (r >= 5) times.push_back(now() - t0);
    }
    std::sort(times.begin(), times.end());
    const double med = times[times.size() / 2];
    bare += med;
    std::printf("  gemm %5zux%5zux%5zu %s%s %-26s %8.3f ms  %7.1f GFLOP/s\n", sh.m, sh.n, sh.k, sh.trans_a ? "T" : "N",
                sh.trans_b ? "T" : "N", be.cpu_ops().matmul().implementation(sh).c_str(), med * 1e3,
                2.0 * double(sh.m * sh.n * sh.k) / med / 1e9);
  }
  std::printf("\nstep phases (%s, batch %zu, %d thread%s, mean of %zu steps):\n", prec.c_str(), batch, threads,
              threads == 1 ? "" : "s", steps);
  const double amp_share = phases.print();
  std::printf("  %-22s %8.3f ms\n", "step", step * 1e3);
  std::printf("\nstep FLOP rate %.1f GFLOP/s | bare matmul rate %.1f GFLOP/s (%.3f ms) | ratio %.3f | AMP bookkeeping %.1f%% of the step\n",
              flops / step / 1e9, flops / bare / 1e9, bare * 1e3, bare / step, 100.0 * amp_share);
  return 0;
}
