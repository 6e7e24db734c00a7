#include "train/export_command.h"

#include <cstdio>

#include "config/config.h"
#include "core/error.h"
#include "core/format.h"
#include "model/make_model.h"
#include "train/checkpoint.h"

namespace amp {

void run_export(const std::string& checkpoint, WeightFormat format, const std::string& out) {
  const Checkpoint ck = load_checkpoint(checkpoint);
  auto bad = [&](const std::string& what) {
    throw Error(ErrorKind::Checkpoint, strcat("checkpoint error: ", checkpoint, ": ", what));
  };
  const auto recorded = ck.header.find("config");
  if (recorded == ck.header.end() || !recorded->is_object()) bad("its header records no config (an older amp_ddp)");
  std::map<std::string, std::string> values;
  for (const auto& [k, v] : recorded->items())
    if (v.is_string()) values[k] = v.get<std::string>();
  const Config cfg = config_from_values(values, checkpoint);
  if (cfg.model.type != ModelType::Gpt)
    throw Error(ErrorKind::Config, strcat("config error: ", checkpoint, ": export writes GPT weights; the checkpoint holds an mlp"));
  // The vocabulary: the token embedding's rows in the checkpoint's layout.
  size_t vocab = 0;
  if (const auto layout = ck.header.find("layout"); layout != ck.header.end() && layout->is_array())
    for (const auto& t : *layout)
      if (t.value("name", "") == "wte.weight") vocab = t.value("rows", size_t(0));
  if (vocab == 0) bad("its layout has no token embedding (wte.weight)");
  const GptOptions o = gpt_options(cfg, vocab);
  const ParamLayout L = gpt_layout(o);
  const auto master = ck.sections.find("master");
  if (master == ck.sections.end() || master->second.size() != L.total * sizeof(float))
    bad(strcat("its master section does not hold the ", L.total, " FP32 weights of the GPT its config describes"));
  write_gpt_weights(out, format, o, L, reinterpret_cast<const float*>(master->second.data()));
  std::printf("wrote %s: %s, %zu parameters (%zu layers x %zu, %zu heads, context %zu, vocabulary %zu), FP32, from step %lld\n",
              out.c_str(), format == WeightFormat::Safetensors ? "safetensors (Hugging Face GPT-2 names)" : "llm.c model file (version 3)",
              L.n_params(), o.n_layer, o.n_embd, o.n_head, o.seq_len, o.vocab, (long long)ck.step());
}

}  // namespace amp
