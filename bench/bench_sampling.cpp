// Sampling's cost per generated token: the key/value cache (Gpt::decoder) against the whole
// context's forward pass (Gpt::next_logits, the decoder's reference), measured in the same run on
// the same model and contexts, and against a ceiling: one read of the working parameters and of
// the cached keys and values at the rate of a copy of the parameters' bytes (a token's forward
// pass reads every weight once). Usage:
//   bench_sampling [--layers 12] [--embd 768] [--heads 12] [--seq 1024] [--vocab 50257]
//                  [--precision bf16] [--threads 1] [--tokens 8] [--contexts 16,256,1000]
//                  [--device cpu|cuda]
// For each context length: a random context, then `tokens` tokens appended one at a time; the
// decoder runs the context's positions once (its first call, printed apart), then one position a
// token. Random weights (GPT-2's initialization): the logits' agreement is printed as the largest
// difference over the largest logit.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gpt_args.h"
#include "step_phases.h"
#include "timed_ops.h"
#include "backend/backend.h"
#include "core/convert.h"
#include "core/rng.h"
#include "model/gpt.h"

using namespace amp;

int main(int argc, char** argv) {
  GptOptions o;
  o.n_layer = 12, o.n_embd = 768, o.n_head = 12, o.seq_len = 1024, o.vocab = 50257;
  size_t tokens = 8;
  int threads = 1;
  std::string prec = "bf16", device = "cpu", contexts_arg = "16,256,1000";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const size_t v = std::strtoul(argv[i + 1], nullptr, 10);
    if (bench::gpt_shape_option(a, argv[i + 1], o)) continue;
    if (a == "--tokens") tokens = std::max<size_t>(1, v);
    else if (a == "--threads") threads = int(v);
    else if (a == "--precision") prec = argv[i + 1];
    else if (a == "--contexts") contexts_arg = argv[i + 1];
    else if (a == "--device") device = argv[i + 1];
    else {
      std::fprintf(stderr, "bench_sampling: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  o.vocab_pad = vocab_pad_for(0, o.vocab);
  const DType dt = prec == "fp32" ? DType::F32 : prec == "fp16" ? DType::F16 : DType::BF16;
  std::unique_ptr<Backend> backend = make_backend(device, 0, threads);
  Backend& be = *backend;
  o.pad_head = be.ops().prefers_padded_gemm();
  bench::TimedOps timed(be.ops(), be.memory().host_accessible() ? nullptr : &be.memory());
  Gpt model(be.memory(), timed, o, dt, 1);
  const ParamLayout& L = model.layout();
  const size_t param_bytes = L.total * dtype_size(dt);
  Buffer params = be.memory().alloc(param_bytes);
  {
    const std::vector<float> w = model.init_params(5);
    std::vector<char> host(param_bytes);
    convert(w.data(), DType::F32, host.data(), dt, L.total);
    be.memory().upload(params.data(), host.data(), param_bytes);
  }
  // The ceiling: the parameters' bytes copied (read and written: the median of 5 copies, whose
  // read half is a token's weight traffic).
  double copy_s = 0;
  {
    Buffer dst = be.memory().alloc(param_bytes);
    std::vector<double> t;
    for (int r = 0; r < 6; ++r) {
      be.memory().synchronize();
      const double t0 = bench::now();
      be.ops().cast(params.data(), dt, dst.data(), dt, L.total);
      be.memory().synchronize();
      if (r > 0) t.push_back(bench::now() - t0);
    }
    std::sort(t.begin(), t.end());
    copy_s = t[t.size() / 2];
  }
  const double read_ms = 1e3 * copy_s / 2;  // the copy reads and writes the bytes: a read is half
  std::printf("sampling: GPT %zu layers x %zu, %zu heads, context %zu, vocab %zu, %s, %s (%d thread%s)\n", o.n_layer,
              o.n_embd, o.n_head, o.seq_len, o.vocab, prec.c_str(), device.c_str(), threads, threads == 1 ? "" : "s");
  std::printf("parameters %.1f MB; their copy %.2f ms (%.1f GB/s): their read %.2f ms a token\n",
              double(param_bytes) / 1e6, 1e3 * copy_s, 2 * double(param_bytes) / copy_s / 1e9, read_ms);
  std::printf("| context | whole context ms/token | cached ms/token | speedup | cached / ceiling (weights and cache read once) | first call (context's positions) ms | largest difference / largest logit |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  Rng rng(9);
  std::vector<std::string> ops_lines;
  std::stringstream ss(contexts_arg);
  for (std::string item; std::getline(ss, item, ',');) {
    const size_t n = std::strtoul(item.c_str(), nullptr, 10);
    if (n == 0) continue;
    std::vector<int32_t> ctx(n + tokens);
    for (auto& t : ctx) t = int32_t(rng.below(o.vocab));
    const auto context = [&](size_t i) { return std::vector<int32_t>(ctx.begin(), ctx.begin() + long(n + i)); };
    std::vector<std::vector<float>> cached, whole;
    double first = 0, t_cached = 0, t_whole = 0;
    {
      const std::unique_ptr<TokenDecoder> dec = model.decoder(params.data());
      for (size_t i = 0; i <= tokens; ++i) {
        const double t0 = bench::now();
        if (i == 1) timed.reset();  // the ops of the one-position calls
        cached.push_back(dec->next_logits(context(i)));
        (i == 0 ? first : t_cached) += bench::now() - t0;
      }
    }
    std::string ops;
    for (const auto& [kind, t] : timed.totals())
      if (1e3 * t.seconds / double(tokens) >= 0.05)
        ops += " " + kind + " " + std::to_string(1e3 * t.seconds / double(tokens)).substr(0, 5);
    ops_lines.push_back("context " + std::to_string(n) + ", cached, ms a token:" + ops);
    for (size_t i = 0; i <= tokens; ++i) {
      const double t0 = bench::now();
      whole.push_back(model.next_logits(params.data(), context(i)));
      if (i > 0) t_whole += bench::now() - t0;  // the first (warm-up) is not counted
    }
    double worst = 0;
    for (size_t i = 0; i <= tokens; ++i) {
      double big = 0, d = 0;
      for (size_t j = 0; j < o.vocab; ++j) {
        big = std::max(big, std::fabs(double(whole[i][j])));
        d = std::max(d, std::fabs(double(cached[i][j]) - double(whole[i][j])));
      }
      worst = std::max(worst, d / big);
    }
    const double c_ms = 1e3 * t_cached / double(tokens), w_ms = 1e3 * t_whole / double(tokens);
    // The ceiling also reads the cached keys and values: 2 C per position per block.
    const double kv_bytes = double(o.n_layer) * double(std::min(n + tokens / 2, o.seq_len)) * 2.0 * double(o.n_embd) *
                            double(dtype_size(dt));
    const double ceiling_ms = read_ms * (1.0 + kv_bytes / double(param_bytes));
    std::printf("| %zu | %.2f | %.2f | %.1fx | %.2f | %.1f | %.2e |\n", n, w_ms, c_ms, w_ms / c_ms, c_ms / ceiling_ms,
                1e3 * first, worst);
  }
  std::printf("\nthe cached calls' ops (each timed from entry to return):\n");
  for (const std::string& l : ops_lines) std::printf("  %s\n", l.c_str());
  return 0;
}
