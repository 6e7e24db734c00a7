// Where a GPT training step's time goes on the CPU backend (or a GPU: --device cuda), and its model
// FLOP rate against the bare GEMM rate of the same shapes and dtype through the same GEMM entry
// point (ComputeOps::gemm: oneDNN, or cuBLASLt), measured in the same run. The bare set is what the step would cost if it were only its
// GEMMs, each at its best: the weight GEMMs over all B x T rows, the attention products as one
// batched GEMM over all B x H heads. Usage:
//   bench_gpt_step [--layers 4] [--embd 128] [--heads 4] [--seq 64] [--vocab 256] [--batch 16]
//                  [--precision fp32] [--threads 1] [--steps 20] [--rounds 3]
//                  [--attention explicit|fused|exact] [--recompute none|attention|mlp|block] [--device cpu|cuda]
// (--attention exact: the fused op on the specification's kernels, where the CPU backend would run
// BF16 with P and dS rounded: on the matmul, src/backend/cpu/ops_attention_matmul.cpp, or on the
// kernels' BF16 products, attention_pairs.h; CPU only)
// On a GPU every op and phase waits for the device before its time is read (nothing overlaps, no
// CUDA graph): the per-op table is each kernel's own time plus a launch and a wait.
// Each round times `steps` steps, then every bare GEMM (median of `steps`), so a ratio compares
// two measurements a few seconds apart; the rounds' ratios and their median are printed (this is
// a shared VM: its speed drifts by up to 20% over tens of seconds).
// FLOPs counted: 2 per multiply-add of every GEMM the step runs (forward, and the two gradient
// GEMMs of each in backward; the attention products in full T x T, as the explicit path computes
// them). With --attention fused those products are not GEMMs of the step: the fused op does the
// causal half of their work and its time counts among the other ops, so the step's FLOP rate
// (still counted with the explicit path's FLOPs) compares the two paths by time.
// The model's ops are timed one by one (bench/timed_ops.h): the last round's step splits into its
// GEMMs (compared with their bare time) and the other kernels, each of those, the optimizer and the
// overflow check compared with a copy of the bytes it must move, measured in the same run (the floor
// of work bound by memory); the last lines say what the step spends beyond its bare GEMMs, and
// where, against what a step/bare of 0.85 or 0.9 would leave. On the CPU's BF16 products path the
// fused attention's heads that ran on it are counted over the run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gpt_args.h"
#include "step_phases.h"
#include "timed_ops.h"
#include "backend/backend.h"
#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/cpu_backend.h"
#include "core/rng.h"
#include "model/gpt.h"

using namespace amp;

namespace {

using bench::now;

struct Shape {
  int64_t m, n, k, batch;
  bool ta, tb;
  const char* what;
  int count;         // times per step
  const char* kind;  // the model op that runs it (TimedOps' kind)
  bool vocab = false;  // the LM head: a dimension of vocab rows or columns is laid out logits_ld() apart
};

}  // namespace

int main(int argc, char** argv) {
  GptOptions o;
  o.n_layer = 4;
  size_t batch = 16, steps = 20, rounds = 3;
  int threads = 1;
  std::string prec = "fp32", device = "cpu";
  bool exact_attention = false;  // --attention exact
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const size_t v = std::strtoul(argv[i + 1], nullptr, 10);
    if (bench::gpt_shape_option(a, argv[i + 1], o)) continue;
    if (a == "--batch") batch = v;
    else if (a == "--steps") steps = v;
    else if (a == "--rounds") rounds = std::max<size_t>(1, v);
    else if (a == "--threads") threads = int(v);
    else if (a == "--precision") prec = argv[i + 1];
    else if (a == "--attention") {
      const std::string at = argv[i + 1];
      o.fused_attention = at == "fused" || at == "exact";
      exact_attention = at == "exact";
    }
    else if (a == "--recompute") {  // none|attention|mlp|block (0|1: none|block)
      const std::string r = argv[i + 1];
      o.recompute = r == "block" || r == "1";
      o.recompute_mlp = r == "mlp";
      o.recompute_attention = r == "attention";
    }
    else if (a == "--device") device = argv[i + 1];
  }
  o.vocab_pad = vocab_pad_for(0, o.vocab);  // model.vocab_pad's default, as the trainer runs it
  const DType dt = prec == "fp32" ? DType::F32 : prec == "fp16" ? DType::F16 : DType::BF16;
  std::unique_ptr<Backend> backend = make_backend(device, 0, threads);
  Backend& be = *backend;
  // Which fused-attention path runs (the CPU's BF16 matmul path, its kernels' BF16 products, or
  // the specification's kernels).
  std::string attention_path;
  bool on_bf16_products = false;  // then the last line counts the heads that took that path
  if (auto* cpu = dynamic_cast<CpuBackend*>(&be)) {
    const cpu::CpuOps& ops = cpu->cpu_ops();
    cpu->cpu_ops().set_exact_attention(exact_attention);
    on_bf16_products = o.fused_attention && !ops.attention_on_matmul(dt) && ops.attention_bf16_products(dt);
    attention_path = ops.attention_on_matmul(dt)       ? " on the BF16 matmul"
                     : ops.attention_bf16_products(dt) ? " on the kernels' BF16 products"
                                                       : " on the specification's kernels";
  } else if (exact_attention) {
    std::fprintf(stderr, "bench_gpt_step: --attention exact is for the CPU backend\n");
    return 2;
  }
  const bool host = be.memory().host_accessible();
  bench::TimedOps timed(be.ops(), host ? nullptr : &be.memory());
  o.pad_head = be.ops().prefers_padded_gemm();  // as make_model decides
  Gpt model(be.memory(), timed, o, dt, batch);
  const size_t T = o.seq_len, C = o.n_embd, H = o.n_head, D = C / H, V = o.vocab, M = batch * T;
  Rng rng(2);
  std::vector<int32_t> tok(M), tgt(M);
  for (size_t i = 0; i < M; ++i) tok[i] = int32_t(rng.below(V)), tgt[i] = int32_t(rng.below(V));
  model.stage_tokens(tok.data(), tgt.data(), batch);
  bench::StepPhases phases(be, model, dt, dt == DType::F16 ? 65536.0f : 1.0f);

  // The step's GEMMs (per step; L layers): y = x W^T (forward), dx = dy W, dW = dy^T x.
  const int64_t Mi = int64_t(M), Ci = int64_t(C), Ti = int64_t(T), Di = int64_t(D), BH = int64_t(batch * H);
  const int l = int(o.n_layer);
  std::vector<Shape> shapes;
  // (the GPT runs its tied LM head through the general gemm, the blocks' layers as linear ops)
  auto linear = [&](int64_t out, int64_t in, const char* what, int times, bool general = false) {
    shapes.push_back({Mi, out, in, 1, false, true, what, times, general ? "gemm" : "linear_forward", general});
    shapes.push_back({Mi, in, out, 1, false, false, what, times, general ? "gemm" : "linear_backward_input", general});
    shapes.push_back({out, in, Mi, 1, true, false, what, times, general ? "gemm" : "linear_backward_weight", general});
  };
  linear(3 * Ci, Ci, "attn.qkv", l);
  linear(Ci, Ci, "attn.proj", l);
  linear(4 * Ci, Ci, "mlp.fc", l);
  linear(Ci, 4 * Ci, "mlp.proj", l);
  linear(int64_t(o.padded_head() ? o.logits_ld() : V), Ci, "lm head", 1, true);  // the model's width
  // Attention per head: S = Q K^T (T x T x D), Y = P V (T x D x T); backward dP = dY V^T, dV = P^T dY,
  // dQ = dS K, dK = dS^T Q.
  shapes.push_back({Ti, Ti, Di, BH, false, true, "attn QK^T", l, "gemm_batched"});
  shapes.push_back({Ti, Di, Ti, BH, false, false, "attn PV", l, "gemm_batched"});
  shapes.push_back({Ti, Ti, Di, BH, false, true, "attn dP", l, "gemm_batched"});
  shapes.push_back({Ti, Di, Ti, BH, true, false, "attn dV", l, "gemm_batched"});
  shapes.push_back({Ti, Di, Ti, BH, false, false, "attn dQ", l, "gemm_batched"});
  shapes.push_back({Ti, Di, Ti, BH, true, false, "attn dK", l, "gemm_batched"});
  // The copy rate the work outside the GEMMs is held against, in bytes read and written a second:
  // ops().cast of 64 MiB of FP32 into another 64 MiB (a parallel memcpy on the CPU, a device-to-device
  // copy on a GPU), out of L2 as the step's tensors are; the best of 9 calls before the rounds and 9
  // after them, so the time of a copy is the lowest the run saw (this VM's copy rate moved by a
  // third between runs).
  const auto measure_copy_rate = [&] {
    const size_t n = size_t(16) << 20;
    Buffer src = be.memory().alloc(n * 4), dst = be.memory().alloc(n * 4);
    be.memory().zero(src.data(), n * 4);
    double best = 1e30;
    for (int r = 0; r < 10; ++r) {
      be.memory().synchronize();
      const double t0 = now();
      be.ops().cast(src.data(), DType::F32, dst.data(), DType::F32, n);
      be.memory().synchronize();
      if (r >= 1) best = std::min(best, now() - t0);
    }
    return double(n) * 8.0 / best;
  };
  double copy_rate = measure_copy_rate();
  std::vector<double> ratios;
  double flops = 0, bare = 0, step = 0;
  std::map<std::string, double> bare_of;  // bare time per model op kind
  const size_t warmup = 3;
  for (size_t round = 0; round < rounds; ++round) {
    const bool last = round + 1 == rounds;
    step = phases.run(batch, 1.0f / float(M), warmup, steps, [&] { timed.reset(); });
    flops = 0, bare = 0;
    bare_of.clear();
    if (last) std::printf("bare GEMMs (%s operands, FP32 accumulation; median of %zu):\n", prec.c_str(), steps);
    for (const Shape& sh : shapes) {
      // Leading dimensions as the model lays them out: the LM head's logits (and their gradient)
      // have rows logits_ld() apart.
      const auto ld = [&](int64_t cols) { return sh.vocab && cols == int64_t(V) ? int64_t(o.logits_ld()) : cols; };
      const int64_t lda = ld(sh.ta ? sh.m : sh.k), ldb = ld(sh.tb ? sh.k : sh.n), ldc = ld(sh.n);
      const int64_t ea = (sh.ta ? sh.k : sh.m) * lda * sh.batch, eb = (sh.tb ? sh.n : sh.k) * ldb * sh.batch,
                    ec = sh.m * ldc * sh.batch;
      Buffer a = be.memory().alloc(size_t(ea) * 4), b = be.memory().alloc(size_t(eb) * 4), c = be.memory().alloc(size_t(ec) * 4);
      // Random operands: 2^20 normal values repeated (the LM head's operands hold hundreds of
      // millions of elements; drawing each would take the host longer than the whole benchmark).
      std::vector<float> fill(size_t(std::max(ea, eb)));
      for (size_t i = 0; i < fill.size(); ++i) fill[i] = i < (size_t(1) << 20) ? float(rng.normal()) : fill[i & ((size_t(1) << 20) - 1)];
      Buffer f32 = be.memory().alloc(fill.size() * 4);
      be.memory().upload(f32.data(), fill.data(), fill.size() * 4);
      be.ops().cast(f32.data(), DType::F32, a.data(), dt, size_t(ea));
      be.ops().cast(f32.data(), DType::F32, b.data(), dt, size_t(eb));
      GemmArgs g;
      g.m = sh.m, g.n = sh.n, g.k = sh.k, g.batch = sh.batch, g.trans_a = sh.ta, g.trans_b = sh.tb;
      g.A = a.data(), g.lda = lda, g.stride_a = ea / sh.batch;
      g.B = b.data(), g.ldb = ldb, g.stride_b = eb / sh.batch;
      g.C = c.data(), g.ldc = ldc, g.stride_c = ec / sh.batch;
      g.ab = dt, g.c = DType::F32;
      std::vector<double> times;
      for (size_t r = 0; r < steps + 3; ++r) {
        be.memory().synchronize();
        const double t0 = now();
        be.ops().gemm(g);
        be.memory().synchronize();
        if (r >= 3) times.push_back(now() - t0);
      }
      std::sort(times.begin(), times.end());
      const double med = times[times.size() / 2];
      const double f = 2.0 * double(sh.m * sh.n * sh.k * sh.batch);
      flops += f * sh.count;
      bare += med * sh.count;
      bare_of[sh.kind] += med * sh.count;
      if (last)
        std::printf("  %-10s %5lldx%5lldx%5lld x%-4lld %s%s  x%-2d %8.3f ms  %7.1f GFLOP/s\n", sh.what, (long long)sh.m,
                    (long long)sh.n, (long long)sh.k, (long long)sh.batch, sh.ta ? "T" : "N", sh.tb ? "T" : "N",
                    sh.count, med * 1e3, f / med / 1e9);
    }
    ratios.push_back(bare / step);
  }
  copy_rate = std::max(copy_rate, measure_copy_rate());
  std::printf("\nstep phases (%s, %zu layers x %zu, %zu heads, T %zu, batch %zu, %s, %d thread%s, %s attention%s, "
              "activations %.1f MiB, mean of %zu steps):\n",
              prec.c_str(), o.n_layer, C, H, T, batch, be.name().c_str(), threads, threads == 1 ? "" : "s",
              o.fused_attention ? ("fused" + attention_path).c_str() : "explicit", o.recompute ? ", recompute block" : o.recompute_mlp ? ", recompute mlp" : o.recompute_attention ? ", recompute attention" : "",
              double(model.buffer_bytes()) / 1048576.0, steps);
  phases.print();
  std::printf("  %-22s %8.3f ms  (%.0f tokens/s)\n", "step", step * 1e3, double(M) / step);
  const double per = 1.0 / double(steps);
  // Bytes the step must move outside its GEMMs: the ops' (below) and the phases' outside them.
  double moved_bytes = 0;
  for (const auto& [phase, seconds] : phases.seconds()) {
    const double b = phases.bytes(phase);
    if (b > 0) std::printf("  %-22s %8.1f MiB moved, %.2fx a copy of as many bytes\n", phase.c_str(), b / 1048576.0,
                           seconds / double(phases.steps()) / (b / copy_rate));
    moved_bytes += b;
  }
  // The model's ops (forward, loss and backward) over the last round's timed steps.
  double gemm_s = 0, other_s = 0, gemm_bare = 0;  // gemm_bare: the bare time of the GEMM kinds the step ran
  std::printf("\nthe model's ops per step (mean over the last round's %zu steps):\n", steps);
  for (const auto& [kind, t] : timed.totals()) {
    std::printf("  %-24s %8.3f ms  %5.1f%%  %5zu calls", kind.c_str(), t.seconds * per * 1e3,
                100.0 * t.seconds * per / step, size_t(double(t.calls) * per + 0.5));
    if (bare_of.count(kind)) {
      std::printf("  (%.2fx their bare GEMMs' %.3f ms)", t.seconds * per / bare_of[kind], bare_of[kind] * 1e3);
      gemm_bare += bare_of[kind];
    }
    if (t.bytes > 0)
      std::printf("  (%.1f MiB, %.2fx a copy of as many bytes)", t.bytes * per / 1048576.0, t.seconds / (t.bytes / copy_rate));
    moved_bytes += t.bytes * per;
    std::printf("\n");
    (bench::TimedOps::is_gemm(kind) ? gemm_s : other_s) += t.seconds * per;
  }
  std::printf("  GEMMs %.3f ms (%.2fx their bare %.3f ms), other ops %.3f ms, outside the model's ops %.3f ms\n",
              gemm_s * 1e3, gemm_s / gemm_bare, gemm_bare * 1e3, other_s * 1e3, (step - gemm_s - other_s) * 1e3);
  // What the step spends beyond its bare GEMMs, what a step/bare goal would leave, and the work
  // outside the GEMMs against a copy of the bytes it must move (its floor where memory bounds it;
  // the attention's products and exps and GELU's arithmetic are above it).
  std::printf("  beyond the bare GEMMs %.3f ms (step/bare 0.85 would leave %.3f, 0.9 %.3f): the GEMMs' excess over "
              "their bare %.3f, the other ops %.3f, outside the ops %.3f, less the bare products that a fused "
              "attention runs in its own kernels %.3f\n",
              (step - bare) * 1e3, bare * (1 / 0.85 - 1) * 1e3, bare * (1 / 0.9 - 1) * 1e3, (gemm_s - gemm_bare) * 1e3,
              other_s * 1e3, (step - gemm_s - other_s) * 1e3, (bare - gemm_bare) * 1e3);
  std::printf("  the other ops and the phases outside them %.3f ms, a copy of their %.1f MiB %.3f ms (%.1f GB/s: "
              "ops().cast of 64 MiB, read + written, the best of 18 calls)\n",
              (step - gemm_s) * 1e3, moved_bytes / 1048576.0, moved_bytes / copy_rate * 1e3, copy_rate / 1e9);
  std::printf("\nstep FLOP rate %.1f GFLOP/s | bare GEMM rate %.1f GFLOP/s (the GEMMs alone: %.3f ms) | ratio %.3f\n",
              flops / step / 1e9, flops / bare / 1e9, bare * 1e3, bare / step);
  if (on_bf16_products)  // heads whose inputs allowed it (bf16_dots_allowed) take it, the rest the specification
    std::printf("fused attention heads on BF16 products: %lld, with native score products: %lld (both over the run)\n",
                (long long)cpu::attention_bf16_product_heads(), (long long)cpu::attention_native_bf16_products());
  std::printf("ratio per round:");
  for (double r : ratios) std::printf(" %.3f", r);
  std::vector<double> sorted = ratios;
  std::sort(sorted.begin(), sorted.end());
  std::printf(" | median %.3f\n", sorted[sorted.size() / 2]);
  return 0;
}
