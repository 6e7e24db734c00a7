#include "train/export_command.h"

#include <cstdio>

#include "config/config.h"
#include "core/error.h"
#include "core/format.h"
#include "model/make_model.h"
#include "train/checkpoint.h"
#include "train/checkpoint_model.h"

namespace amp {

void run_export(const std::string& checkpoint, WeightFormat format, const std::string& out) {
  const Checkpoint ck = load_checkpoint_header(checkpoint);  // the weights left in the file
  const Config cfg = checkpoint_config(ck);
  if (cfg.model.type != ModelType::Gpt)
    throw Error(ErrorKind::Config, strcat("config error: ", checkpoint, ": export writes GPT weights; the checkpoint holds an mlp"));
  // The vocabulary: the token embedding's rows in the checkpoint's layout.
  const size_t vocab = checkpoint_rows(ck, "wte.weight");
  if (vocab == 0)
    throw Error(ErrorKind::Checkpoint, strcat("checkpoint error: ", checkpoint, ": its layout has no token embedding (wte.weight)"));
  const GptOptions o = gpt_options(cfg, vocab);
  const ParamLayout L = gpt_layout(o);
  // Tensor by tensor from the checkpoint into the file (llm.c orders them its own way).
  write_gpt_weights(out, format, o, L, *checkpoint_master_tensors(ck, L));
  std::printf("wrote %s: %s, %zu parameters (%zu layers x %zu, %zu heads, context %zu, vocabulary %zu), FP32, from step %lld\n",
              out.c_str(), format == WeightFormat::Safetensors ? "safetensors (Hugging Face GPT-2 names)" : "llm.c model file (version 3)",
              L.n_params(), o.n_layer, o.n_embd, o.n_head, o.seq_len, o.vocab, (long long)ck.step());
}

}  // namespace amp
