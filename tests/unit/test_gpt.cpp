// The GPT model against a float64 PyTorch reference (tests/data/gpt_tiny_reference.json, written by
// scripts/gpt_reference.py): logits, loss and the gradient of every parameter of a tiny GPT for
// fixed weights and tokens, in FP32 (tight) and BF16/FP16 (the formats' precision), on the CPU
// backend; plus the layout's names and the determinism of two runs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "core/convert.h"
#include "core/half.h"
#include "core/rng.h"
#include "model/gpt.h"
#include "data/tokenizer.h"
#include "model/sampling.h"

using namespace amp;

namespace {

nlohmann::json reference() {
  std::ifstream in(std::string(AMP_SOURCE_DIR) + "/tests/data/gpt_tiny_reference.json");
  REQUIRE(in.good());
  nlohmann::json j;
  in >> j;
  return j;
}

struct Result {
  std::vector<float> logits, grads;  // grads in our layout, unscaled, FP32
  double loss = 0;
};

Result run(const nlohmann::json& ref, DType dt, float scale, bool fused_attention = false) {
  const auto& c = ref["config"];
  GptOptions o;
  o.fused_attention = fused_attention;
  o.vocab = c["vocab_size"], o.n_layer = c["n_layer"], o.n_head = c["n_head"], o.n_embd = c["n_embd"];
  o.seq_len = c["seq_len"];
  const size_t B = c["batch"], T = o.seq_len, V = o.vocab, N = B * T;
  CpuBackend be(1);
  Gpt model(be.memory(), be.ops(), o, dt, B);
  const ParamLayout& L = model.layout();
  // Parameters by name from the reference (its offsets are unpadded; ours are 32-aligned).
  std::vector<float> w(L.total, 0.0f);
  const auto& values = ref["param_values"];
  REQUIRE(ref["params"].size() == L.tensors.size());
  for (size_t i = 0; i < L.tensors.size(); ++i) {
    const auto& p = ref["params"][i];
    REQUIRE(p["name"] == L.tensors[i].name);
    REQUIRE(size_t(p["size"]) == L.tensors[i].span.count);
    for (size_t k = 0; k < L.tensors[i].span.count; ++k)
      w[L.tensors[i].span.offset + k] = float(values[size_t(p["offset"]) + k].get<double>());
  }
  Buffer params = be.memory().alloc(L.total * dtype_size(dt)), grads = be.memory().alloc(L.total * dtype_size(dt));
  convert(w.data(), DType::F32, params.data(), dt, L.total);
  std::vector<int32_t> tok = ref["tokens"].get<std::vector<int32_t>>(), tgt = ref["targets"].get<std::vector<int32_t>>();
  model.stage_tokens(tok.data(), tgt.data(), B);
  struct { float scale, loss; int32_t correct; } s{scale, 0, 0};
  model.forward_loss(params.data(), B, &s.scale, 1.0f / float(N), true, LossSums{&s.loss, &s.correct});
  std::vector<int> order;
  model.backward(params.data(), grads.data(), B, [&](int t) { order.push_back(t); });
  // Every tensor reported ready once, last tensor first.
  REQUIRE(order.size() == L.tensors.size());
  for (size_t i = 0; i < order.size(); ++i) CHECK(order[i] == int(L.tensors.size() - 1 - i));
  Result r;
  r.loss = double(s.loss) / double(N);
  r.logits.resize(N * V);
  REQUIRE(model.options().logits_ld() == V);  // the reference's vocabulary is below 256: no padding
  convert(model.logits_data(), dt, r.logits.data(), DType::F32, N * V);
  r.grads.resize(L.total);
  convert(grads.data(), dt, r.grads.data(), DType::F32, L.total);
  for (auto& g : r.grads) g /= scale;
  return r;
}

// max |a - b| / (atol + rtol * max|b|) over a tensor must stay <= 1.
void compare(const std::string& what, const float* got, const std::vector<double>& want, size_t n, double rtol,
             double atol_rel) {
  double maxabs = 0;
  for (size_t i = 0; i < n; ++i) maxabs = std::max(maxabs, std::fabs(want[i]));
  const double tol = atol_rel * maxabs + 1e-30;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    const double e = std::fabs(double(got[i]) - want[i]) / (tol + rtol * std::fabs(want[i]));
    if (e > worst) worst = e, at = i;
  }
  INFO(what << ": worst element " << at << " got " << got[at] << " want " << want[at] << " (max |want| " << maxabs << ")");
  CHECK(worst <= 1.0);
}

void check_against(const nlohmann::json& ref, const Result& r, double rtol, double atol_rel) {
  const double loss = ref["loss"];
  CHECK(std::fabs(r.loss - loss) <= (rtol + atol_rel) * loss);
  compare("logits", r.logits.data(), ref["logits"].get<std::vector<double>>(), r.logits.size(), rtol, atol_rel);
  const std::vector<double> g = ref["param_grads"];
  CpuBackend be(1);
  const auto& c = ref["config"];
  GptOptions o;
  o.vocab = c["vocab_size"], o.n_layer = c["n_layer"], o.n_head = c["n_head"], o.n_embd = c["n_embd"];
  o.seq_len = c["seq_len"];
  const ParamLayout L = gpt_layout(o);
  for (size_t i = 0; i < L.tensors.size(); ++i) {
    const auto& p = ref["params"][i];
    const size_t off = p["offset"];
    compare(L.tensors[i].name, r.grads.data() + L.tensors[i].span.offset,
            std::vector<double>(g.begin() + long(off), g.begin() + long(off + L.tensors[i].span.count)),
            L.tensors[i].span.count, rtol, atol_rel);
  }
}

}  // namespace

TEST_CASE("gpt: layout names and shapes are GPT-2's, 32-element aligned", "[gpt]") {
  GptOptions o;
  o.vocab = 50, o.seq_len = 7, o.n_layer = 2, o.n_head = 2, o.n_embd = 8;
  const ParamLayout L = gpt_layout(o);
  REQUIRE(L.tensors.size() == 2 + 12 * 2 + 2);
  CHECK(L.tensors[0].name == "wte.weight");
  CHECK(L.tensors[1].name == "wpe.weight");
  CHECK(L.tensors[2 + 12 + 2].name == "h.1.attn.qkv.weight");
  CHECK(L.tensors[2 + 12 + 2].rows == 24);
  CHECK(L.tensors.back().name == "ln_f.bias");
  for (const auto& t : L.tensors) CHECK(t.span.offset % 32 == 0);
  CHECK(L.n_params() == 50 * 8 + 7 * 8 + 2 * (2 * 8 + 24 * 8 + 24 + 64 + 8 + 2 * 8 + 32 * 8 + 32 + 8 * 32 + 8) + 2 * 8);
}

TEST_CASE("gpt: logits, loss and every gradient match the float64 PyTorch reference in FP32", "[gpt]") {
  const nlohmann::json ref = reference();
  const Result r = run(ref, DType::F32, 1.0f);
  check_against(ref, r, 1e-4, 1e-5);
  const Result again = run(ref, DType::F32, 1.0f);
  CHECK(again.grads == r.grads);  // deterministic
  CHECK(again.logits == r.logits);
}

TEST_CASE("gpt: fused attention matches the float64 PyTorch reference as the explicit path does", "[gpt][attention]") {
  // model.attention fused (backend/attention_args.h) against the same float64 reference and the
  // same tolerances as the explicit path above: FP32, and BF16 / FP16 (loss-scaled).
  const nlohmann::json ref = reference();
  const Result r = run(ref, DType::F32, 1.0f, true);
  check_against(ref, r, 1e-4, 1e-5);
  const Result explicit_path = run(ref, DType::F32, 1.0f, false);
  CHECK(std::fabs(r.loss - explicit_path.loss) <= 1e-6 * explicit_path.loss);
  const Result again = run(ref, DType::F32, 1.0f, true);
  CHECK(again.grads == r.grads);  // deterministic
  check_against(ref, run(ref, DType::BF16, 1.0f, true), 0.05, 0.03);
  check_against(ref, run(ref, DType::F16, 1024.0f, true), 0.01, 0.005);
}

TEST_CASE("gpt: BF16 and FP16 (loss-scaled) match the reference within the formats' precision", "[gpt]") {
  const nlohmann::json ref = reference();
  SECTION("bf16") { check_against(ref, run(ref, DType::BF16, 1.0f), 0.05, 0.03); }
  SECTION("fp16") { check_against(ref, run(ref, DType::F16, 1024.0f), 0.01, 0.005); }
}

TEST_CASE("sampling: top-k, top-p and temperature choose among the likeliest, seeded, and byte text is valid UTF-8",
          "[gpt]") {
  const std::vector<float> logits{0.0f, 5.0f, 4.0f, -3.0f, 4.0f};
  // top_k 1: always the largest; ties broken by the lower id among equal logits.
  for (double u : {0.0, 0.5, 0.999}) CHECK(sample_token(logits, 1.0, 1, 1.0, u) == 1);
  // top_k 3 among {1, 2, 4}: u near 1 takes the last of them (4, the higher id of the tie).
  CHECK(sample_token(logits, 1.0, 3, 1.0, 0.0) == 1);
  CHECK(sample_token(logits, 1.0, 3, 1.0, 0.9999) == 4);
  // A low temperature concentrates on the largest.
  CHECK(sample_token(logits, 0.01, 0, 1.0, 0.99) == 1);
  // top_p: probabilities 0.5737 (token 1), 0.2111 (2 and 4), 0.0039 (0), 0.0002 (3). Up to 0.5737
  // the nucleus is token 1 alone; at 0.6 tokens 1 and 2 (0.7848), renormalized: 1 below
  // u = 0.7310, 2 above; at 0.9 tokens 1, 2 and 4.
  for (double u : {0.0, 0.5, 0.999}) CHECK(sample_token(logits, 1.0, 0, 0.5, u) == 1);
  CHECK(sample_token(logits, 1.0, 0, 0.57, 0.999) == 1);
  CHECK(sample_token(logits, 1.0, 0, 0.6, 0.72) == 1);
  CHECK(sample_token(logits, 1.0, 0, 0.6, 0.74) == 2);
  CHECK(sample_token(logits, 1.0, 0, 0.6, 0.9999) == 2);
  CHECK(sample_token(logits, 1.0, 0, 0.9, 0.9999) == 4);
  CHECK(sample_token(logits, 1.0, 2, 0.9, 0.9999) == 2);  // top_k first: {1, 2}, which reach 0.9 of their own
  CHECK_THROWS(sample_token(logits, 1.0, 0, 0.0, 0.5));
  CHECK_THROWS(sample_token(logits, 1.0, 0, 1.5, 0.5));
  // The same seed gives the same text.
  auto next = [](const std::vector<int32_t>& ctx) {
    std::vector<float> l(256, 0.0f);
    l[size_t('a' + ctx.size() % 3)] = 2.0f;
    return l;
  };
  SampleOptions o;
  o.tokens = 50;
  CHECK(generate({'x'}, o, next) == generate({'x'}, o, next));
  // Bytes that are not UTF-8 are escaped; valid sequences and newlines pass; ids beyond the bytes
  // (a vocabulary above 256 on byte text) are marked.
  const auto bytes = make_tokenizer("bytes");
  CHECK(bytes->decode({'h', 'i', '\n', 0xC3, 0xA9, 0xAB, 0x01}) == "hi\n\xC3\xA9\\xAB\\x01");
  CHECK(bytes->decode({'a', 300, 'b'}) == "a<|300|>b");
  CHECK(bytes->encode("h\xC3\xA9") == std::vector<int32_t>{'h', 0xC3, 0xA9});
  CHECK(make_tokenizer("") == nullptr);
}

TEST_CASE("gpt: next_logits over the context's positions only gives the full window's logits bit for bit", "[gpt]") {
  // seq_len 160: contexts of 5 and 70 tokens run 64 and 128 positions (kSampleStep), 160 and 200
  // the whole window (200: its last 160 tokens). Bit for bit at this shape; at GPT-2's some logits
  // differ by one unit of the dtype's rounding where a product's shape changes oneDNN's blocking
  // (docs/design.md).
  GptOptions o;
  o.vocab = 300, o.seq_len = 160, o.n_layer = 2, o.n_head = 2, o.n_embd = 32, o.vocab_pad = 64;
  amp::Rng rng(19);
  std::vector<int32_t> ctx(200);
  for (auto& t : ctx) t = int32_t(rng.below(o.vocab));
  for (DType dt : {DType::F32, DType::BF16})
    for (bool fused : {false, true}) {
      o.fused_attention = fused;
      CpuBackend be(2);
      Gpt model(be.memory(), be.ops(), o, dt, 1);
      const ParamLayout& L = model.layout();
      const std::vector<float> w = model.init_params(23);
      Buffer params = be.memory().alloc(L.total * dtype_size(dt));
      convert(w.data(), DType::F32, params.data(), dt, L.total);
      for (size_t n : {size_t(5), size_t(70), size_t(160), size_t(200)}) {
        INFO(dtype_name(dt) << (fused ? ", fused" : ", explicit") << ", context " << n);
        const std::vector<int32_t> context(ctx.begin(), ctx.begin() + long(n));
        const std::vector<float> next = model.next_logits(params.data(), context);
        // The training forward over the window holding the context's last seq_len tokens (then
        // other tokens: they do not reach row m - 1).
        const size_t m = std::min(n, o.seq_len);
        std::vector<int32_t> tok(ctx.end() - long(o.seq_len), ctx.end()), tgt(o.seq_len, 0);
        std::copy(context.end() - long(m), context.end(), tok.begin());
        model.stage_tokens(tok.data(), tgt.data(), 1);
        struct { float scale, loss; int32_t correct; } s{1.0f, 0, 0};
        model.forward_loss(params.data(), 1, &s.scale, 1.0f / float(o.seq_len), false, LossSums{&s.loss, &s.correct});
        size_t differ = 0;
        for (size_t j = 0; j < o.vocab; ++j) {
          float f;
          convert(static_cast<const char*>(model.logits_data()) + ((m - 1) * o.logits_ld() + j) * dtype_size(dt), dt, &f,
                  DType::F32, 1);
          differ += f32_bits(f) != f32_bits(next[j]);
        }
        CHECK(differ == 0);
      }
    }
}

TEST_CASE("gpt: the decoder's key/value cache gives next_logits' logits within the dtype's rounding, one position a token",
          "[gpt]") {
  // A generation's contexts: a prompt, then one token more each call past seq_len (the window
  // slides: every position again), the same context twice, a new prompt longer than the scratch's
  // chunk, and one sharing only its first 40 tokens with it. The decoder's logits against
  // next_logits' (the whole context each time; other GEMM shapes and, for the fused model, the
  // explicit path's probabilities rounded to the dtype), the positions it ran, and its bits at 1
  // and 2 threads and with buffers for more rows and the decoder's buffers allocated with the
  // model (the trainer's sample; the sample command's model has one row and the decoder its own).
  GptOptions o;
  o.vocab = 300, o.seq_len = 100, o.n_layer = 2, o.n_head = 2, o.n_embd = 32, o.vocab_pad = 64;
  amp::Rng rng(29);
  std::vector<int32_t> text(140), other(80), third(90);
  for (auto& t : text) t = int32_t(rng.below(o.vocab));
  for (auto& t : other) t = int32_t(rng.below(o.vocab));
  for (auto& t : third) t = int32_t(rng.below(o.vocab));
  std::copy(other.begin(), other.begin() + 40, third.begin());
  std::vector<std::vector<int32_t>> contexts;
  std::vector<size_t> runs;  // the positions each call must run
  for (size_t n = 5; n <= text.size(); ++n) {
    contexts.emplace_back(text.begin(), text.begin() + long(n));
    runs.push_back(n == 5 ? 5 : n <= o.seq_len ? 1 : o.seq_len);
  }
  contexts.push_back(contexts.back()), runs.push_back(1);  // the same context: its last position again
  contexts.push_back(other), runs.push_back(80);
  contexts.push_back(third), runs.push_back(90 - 40);
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (bool fused : {false, true})
      for (int recompute : {0, 1, 2, 3}) {  // none, block, mlp, attention
        if (fused && recompute == 3) continue;  // the fused path keeps no probabilities
        o.fused_attention = fused, o.recompute = recompute == 1, o.recompute_mlp = recompute == 2;
        o.recompute_attention = recompute == 3;
        INFO(dtype_name(dt) << (fused ? ", fused" : ", explicit") << (recompute == 1 ? ", recompute block" : "")
                            << (recompute == 2 ? ", recompute mlp" : "") << (recompute == 3 ? ", recompute attention" : ""));
        std::vector<std::vector<uint32_t>> bits_at[3];
        for (int run = 0; run < 3; ++run) {  // 1 thread, 2 threads, buffers for 3 rows (a trainer's)
          const int threads = run == 1 ? 2 : 1;
          CpuBackend be(threads);
          GptOptions ob = o;
          ob.sampling = run == 2;  // the decoder's buffers allocated with the model's
          Gpt model(be.memory(), be.ops(), ob, dt, run == 2 ? 3 : 1);
          const ParamLayout& L = model.layout();
          const std::vector<float> w = model.init_params(31);
          Buffer params = be.memory().alloc(L.total * dtype_size(dt));
          convert(w.data(), DType::F32, params.data(), dt, L.total);
          std::vector<std::vector<float>> got;
          {
            const std::unique_ptr<TokenDecoder> dec = model.decoder(params.data());
            for (size_t i = 0; i < contexts.size(); ++i) {
              const size_t before = dec->positions_run();
              got.push_back(dec->next_logits(contexts[i]));
              INFO("context " << i << " of " << contexts[i].size() << " tokens");
              REQUIRE(dec->positions_run() - before == runs[i]);
            }
          }
          for (const auto& g : got) {
            bits_at[run].emplace_back();
            for (float x : g) bits_at[run].back().push_back(f32_bits(x));
          }
          if (run > 0) continue;
          // Within a few units of the dtype's rounding of the largest logit (FP32: of its
          // accumulation over C).
          const double unit = dt == DType::F32 ? 1e-6 : dt == DType::BF16 ? 1.0 / 256 : 1.0 / 2048;
          double worst = 0;
          for (size_t i = 0; i < contexts.size(); ++i) {
            const std::vector<float> ref = model.next_logits(params.data(), contexts[i]);
            double big = 0;
            for (float x : ref) big = std::max(big, std::fabs(double(x)));
            for (size_t j = 0; j < o.vocab; ++j)
              worst = std::max(worst, std::fabs(double(got[i][j]) - double(ref[j])) / (unit * big));
          }
          INFO("worst difference " << worst << " units of the dtype's rounding of the largest logit");
          CHECK(worst <= 8);
        }
        CHECK(bits_at[0] == bits_at[1]);
        CHECK(bits_at[0] == bits_at[2]);
      }
}

TEST_CASE("gpt: padded logits rows and recomputed blocks give the plain loss, gradients, logits and samples bit for bit", "[gpt]") {
  // GPT-2's 50257 is padded to 50304 for aligned GEMMs; here a vocabulary of 300 padded to 320
  // and 384 columns (and the automatic choice) against no padding.
  CHECK(vocab_pad_for(0, 50257) == 128);
  CHECK(vocab_pad_for(0, 256) == 1);
  CHECK(vocab_pad_for(64, 256) == 64);
  GptOptions base;
  base.vocab = 300, base.seq_len = 16, base.n_layer = 3, base.n_head = 2, base.n_embd = 32;
  CHECK(GptOptions{300, 16, 2, 2, 32, 128}.logits_ld() == 384);
  const size_t B = 3, T = base.seq_len, V = base.vocab, N = B * T;
  amp::Rng rng(7);
  std::vector<int32_t> tok(N), tgt(N);
  for (size_t i = 0; i < N; ++i) tok[i] = int32_t(rng.below(V)), tgt[i] = int32_t(rng.below(V));
  struct Out {
    float loss = 0;
    int32_t correct = 0;
    std::vector<uint32_t> grads, logits, next;
    std::vector<int32_t> sample;
  };
  auto run_with = [&](size_t pad, DType dt, float scale, bool recompute = false, bool fused = false,
                      bool pad_head = false, bool recompute_mlp = false, bool recompute_attention = false) {
    GptOptions o = base;
    o.vocab_pad = pad;
    o.pad_head = pad_head;
    o.recompute = recompute;
    o.recompute_mlp = recompute_mlp;
    o.recompute_attention = recompute_attention;
    o.fused_attention = fused;
    CpuBackend be(2);
    Gpt model(be.memory(), be.ops(), o, dt, B);
    const ParamLayout& L = model.layout();
    const std::vector<float> w = model.init_params(11);
    Buffer params = be.memory().alloc(L.total * dtype_size(dt)), grads = be.memory().alloc(L.total * dtype_size(dt));
    convert(w.data(), DType::F32, params.data(), dt, L.total);
    model.stage_tokens(tok.data(), tgt.data(), B);
    struct { float scale, loss; int32_t correct; } s{scale, 0, 0};
    model.forward_loss(params.data(), B, &s.scale, 1.0f / float(N), true, LossSums{&s.loss, &s.correct});
    Out out;
    out.loss = s.loss, out.correct = s.correct;
    const size_t ld = o.logits_ld(), es = dtype_size(dt);
    for (size_t r = 0; r < N; ++r)
      for (size_t j = 0; j < V; ++j) {
        float f;
        convert(static_cast<const char*>(model.logits_data()) + (r * ld + j) * es, dt, &f, DType::F32, 1);
        out.logits.push_back(f32_bits(f));
      }
    model.backward(params.data(), grads.data(), B, [](int) {});
    std::vector<float> g(L.total);
    convert(grads.data(), dt, g.data(), DType::F32, L.total);
    for (float x : g) out.grads.push_back(f32_bits(x));
    for (float x : model.next_logits(params.data(), {1, 2, 3})) out.next.push_back(f32_bits(x));
    SampleOptions so;
    so.tokens = 24;
    out.sample = generate({5, 6}, so, [&](const std::vector<int32_t>& ctx) { return model.next_logits(params.data(), ctx); });
    return out;
  };
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    const float scale = dt == DType::F16 ? 1024.0f : 1.0f;
    const Out plain = run_with(1, dt, scale);
    for (size_t pad : {size_t(64), size_t(128)}) {
      for (bool pad_head : {false, true}) {
        INFO(dtype_name(dt) << ", rows padded to a multiple of " << pad << (pad_head ? ", the LM head padded" : ""));
        const Out padded = run_with(pad, dt, scale, false, false, pad_head);
        CHECK(f32_bits(padded.loss) == f32_bits(plain.loss));
        CHECK(padded.correct == plain.correct);
        CHECK(padded.logits == plain.logits);
        CHECK(padded.grads == plain.grads);
        CHECK(padded.next == plain.next);
        CHECK(padded.sample == plain.sample);
        REQUIRE(padded.next.size() == V);
      }
    }
    // model.recompute block: blocks 0 and 1 computed again inside backward, from their inputs.
    INFO(dtype_name(dt) << ", recomputed blocks");
    const Out rec = run_with(1, dt, scale, true);
    CHECK(f32_bits(rec.loss) == f32_bits(plain.loss));
    CHECK(rec.logits == plain.logits);
    CHECK(rec.grads == plain.grads);
    CHECK(rec.sample == plain.sample);
    // model.recompute mlp: blocks 0 and 1's fc and GELU computed again inside backward.
    INFO(dtype_name(dt) << ", recomputed MLPs");
    const Out rec_mlp = run_with(1, dt, scale, false, false, false, true);
    CHECK(f32_bits(rec_mlp.loss) == f32_bits(plain.loss));
    CHECK(rec_mlp.logits == plain.logits);
    CHECK(rec_mlp.grads == plain.grads);
    CHECK(rec_mlp.sample == plain.sample);
    // model.recompute attention: every head's probabilities computed again inside backward.
    INFO(dtype_name(dt) << ", recomputed attention probabilities");
    const Out rec_att = run_with(1, dt, scale, false, false, false, false, true);
    CHECK(f32_bits(rec_att.loss) == f32_bits(plain.loss));
    CHECK(rec_att.logits == plain.logits);
    CHECK(rec_att.grads == plain.grads);
    CHECK(rec_att.sample == plain.sample);
    // The same with fused attention: recomputed blocks and MLPs give the stored blocks' bits.
    INFO(dtype_name(dt) << ", fused attention, recomputed blocks and MLPs");
    const Out fused = run_with(1, dt, scale, false, true), fused_rec = run_with(1, dt, scale, true, true),
              fused_mlp = run_with(1, dt, scale, false, true, false, true);
    for (const Out* r : {&fused_rec, &fused_mlp}) {
      CHECK(f32_bits(r->loss) == f32_bits(fused.loss));
      CHECK(r->logits == fused.logits);
      CHECK(r->grads == fused.grads);
      CHECK(r->sample == fused.sample);
    }
  }
}

TEST_CASE("gpt: the memory plan's activation bytes are what the model allocates", "[gpt]") {
  // --dry-run and make_model's memory check use Gpt::activation_bytes; the run reports what the
  // model allocated (Model::buffer_bytes). Both come from Gpt::buffer_sizes.
  CpuBackend be(1);
  for (const DType dt : {DType::F32, DType::BF16})
    for (const size_t rows : {size_t(1), size_t(8)})
      for (const GptOptions& o : {GptOptions{300, 16, 2, 2, 32, 128}, GptOptions{50257, 64, 3, 4, 128, 128},
                                  GptOptions{300, 16, 4, 2, 32, 128, true}, GptOptions{50257, 64, 3, 4, 128, 128, true},
                                  GptOptions{300, 16, 4, 2, 32, 128, false, true},
                                  GptOptions{50257, 64, 3, 4, 128, 128, true, true},
                                  GptOptions{50257, 64, 3, 4, 128, 128, false, true, false, true},
                                  GptOptions{300, 16, 4, 2, 32, 128, true, false, false, false, true},
                                  GptOptions{50257, 64, 3, 4, 128, 128, false, true, false, false, true},
                                  GptOptions{300, 16, 4, 2, 32, 128, false, false, false, false, true, true},
                                  GptOptions{50257, 64, 3, 4, 128, 128, false, true, false, false, false, true},
                                  GptOptions{300, 16, 4, 2, 32, 128, false, false, false, false, false, false, true},
                                  GptOptions{50257, 64, 3, 4, 128, 128, false, false, false, false, true, true, true}}) {
        Gpt model(be.memory(), be.ops(), o, dt, rows);
        size_t plan = 0;
        REQUIRE(Gpt::activation_bytes(o, rows, dt, &plan));
        INFO("vocab " << o.vocab << (o.recompute ? ", recompute" : "") << (o.recompute_mlp ? ", recompute mlp" : "")
                      << (o.recompute_attention ? ", recompute attention" : "") << (o.fused_attention ? ", fused" : "") << ", " << rows << " rows, " << dtype_name(dt) << ": plan " << plan << ", allocated "
                      << model.buffer_bytes());
        CHECK(model.max_rows() == rows);
        CHECK(plan == model.buffer_bytes());
        if (o.recompute) {  // less than the same model keeping every block
          GptOptions kept = o;
          kept.recompute = false;
          CHECK(model.buffer_bytes() < Gpt(be.memory(), be.ops(), kept, dt, rows).buffer_bytes());
        }
        if (o.recompute_attention) {  // no block's probabilities, one head's buffer instead
          GptOptions kept = o;
          kept.recompute_attention = false;
          const size_t e = dtype_size(dt), tt = rows * o.seq_len * o.seq_len * e;
          CHECK(model.buffer_bytes() + o.n_layer * o.n_head * tt == Gpt(be.memory(), be.ops(), kept, dt, rows).buffer_bytes() + tt);
        }
        if (o.recompute_mlp) {  // every block but one without its fc and gelu (8 C a position)
          GptOptions kept = o;
          kept.recompute_mlp = false;
          CHECK(model.buffer_bytes() + (o.n_layer - 1) * rows * o.seq_len * 8 * o.n_embd * dtype_size(dt) ==
                Gpt(be.memory(), be.ops(), kept, dt, rows).buffer_bytes());
        }
        if (o.padded_head()) {  // the padded LM head: wte padded to Vp rows in the compute dtype
          GptOptions plain = o;
          plain.pad_head = false;
          CHECK(model.buffer_bytes() == Gpt(be.memory(), be.ops(), plain, dt, rows).buffer_bytes() +
                                            o.logits_ld() * o.n_embd * dtype_size(dt));
        }
        if (o.sampling) {  // the decoder's buffers: its attention scratch, with recompute its cache
          GptOptions plain = o;
          plain.sampling = false;
          const size_t e = dtype_size(dt), scratch = o.n_head * 64 * o.seq_len * (4 + e);
          CHECK(model.buffer_bytes() == Gpt(be.memory(), be.ops(), plain, dt, rows).buffer_bytes() + scratch +
                                            (o.recompute ? o.n_layer * o.seq_len * 3 * o.n_embd * e : 0));
        }
        if (o.fused_attention) {  // less than the explicit attention's probabilities and scores
          GptOptions expl = o;
          expl.fused_attention = false;
          CHECK(model.buffer_bytes() < Gpt(be.memory(), be.ops(), expl, dt, rows).buffer_bytes());
        }
      }
}
