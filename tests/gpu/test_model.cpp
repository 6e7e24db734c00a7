// The GPT's sampling on the device: the decoder's key/value cache (model/gpt_decoder.cpp) against
// the CPU twin's decoder and against the device's own whole-context next_logits.
#include "device_env.h"

#include "model/gpt.h"

using namespace amp;
using namespace gpu_test;

namespace {

// The largest |a - b| over the largest |b|.
double worst_relative(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double big = 0, d = 0;
  for (size_t j = 0; j < a.size(); ++j) {
    REQUIRE(std::isfinite(a[j]));
    big = std::max(big, std::fabs(double(b[j])));
    d = std::max(d, std::fabs(double(a[j]) - double(b[j])));
  }
  return d / big;
}

}  // namespace

TEST_CASE("gpt: the decoder's cached logits on the device agree with the CPU twin's and with next_logits'",
          "[.cuda][model]") {
  // Contexts: a 5-token prompt grown one token a call past seq_len (the window slides), then a new
  // 70-token prompt. Head dimension 64 (the tensor cores' fused attention in the whole-context
  // passes), a padded vocabulary. Within a few units of BF16's rounding of the largest logit (the
  // device's GEMMs sum in other orders); the CPU "device" of the logic build gives the same bits.
  std::unique_ptr<Backend> dev = make_device();
  CpuBackend cpu(2);
  GptOptions o;
  o.vocab = 300, o.seq_len = 80, o.n_layer = 2, o.n_head = 2, o.n_embd = 128, o.vocab_pad = 64;
  const DType dt = DType::BF16;
  amp::Rng rng(41);
  std::vector<int32_t> text(90), other(70);
  for (auto& t : text) t = int32_t(rng.below(o.vocab));
  for (auto& t : other) t = int32_t(rng.below(o.vocab));
  std::vector<std::vector<int32_t>> contexts;
  for (size_t n = 5; n <= text.size(); n += n < 70 ? 13 : 1) contexts.emplace_back(text.begin(), text.begin() + long(n));
  contexts.push_back(other);
  for (bool fused : {false, true})
    for (bool recompute : {false, true}) {
      o.fused_attention = fused, o.recompute = recompute;
      INFO((fused ? "fused" : "explicit") << (recompute ? ", recompute" : ""));
      GptOptions od = o;
      od.pad_head = dev->ops().prefers_padded_gemm();
      Gpt on_dev(dev->memory(), dev->ops(), od, dt, 1), on_cpu(cpu.memory(), cpu.ops(), o, dt, 1);
      const ParamLayout& L = on_cpu.layout();
      const std::vector<float> w = on_cpu.init_params(43);
      std::vector<unsigned char> raw(L.total * dtype_size(dt));
      convert(w.data(), DType::F32, raw.data(), dt, L.total);
      Buffer pd = dev->memory().alloc(raw.size()), pc = cpu.memory().alloc(raw.size());
      dev->memory().upload(pd.data(), raw.data(), raw.size());
      cpu.memory().upload(pc.data(), raw.data(), raw.size());
      std::vector<std::vector<float>> got_dev, got_cpu;
      {
        const std::unique_ptr<TokenDecoder> dd = on_dev.decoder(pd.data()), dc = on_cpu.decoder(pc.data());
        for (const auto& c : contexts) {
          got_dev.push_back(dd->next_logits(c));
          got_cpu.push_back(dc->next_logits(c));
        }
        CHECK(dd->positions_run() == dc->positions_run());
      }
      double vs_cpu = 0, vs_whole = 0;
      for (size_t i = 0; i < contexts.size(); ++i) {
        vs_cpu = std::max(vs_cpu, worst_relative(got_dev[i], got_cpu[i]));
        vs_whole = std::max(vs_whole, worst_relative(got_dev[i], on_dev.next_logits(pd.data(), contexts[i])));
      }
      INFO("largest difference / largest logit: against the CPU's decoder " << vs_cpu << ", against next_logits "
                                                                            << vs_whole);
      CHECK(vs_cpu <= 8.0 / 256);
      CHECK(vs_whole <= 8.0 / 256);
      if (!device_is_gpu()) CHECK(vs_cpu == 0);
    }
}
