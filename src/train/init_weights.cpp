#include "train/init_weights.h"

#include <map>
#include <memory>
#include <string>

#include "config/config.h"
#include "core/error.h"
#include "model/make_model.h"
#include "model/weights_io.h"
#include "train/checkpoint.h"
#include "train/checkpoint_fields.h"
#include "train/checkpoint_model.h"

namespace amp {

namespace {

// A checkpoint's masters read from its file, which the reader keeps open.
class CheckpointWeights : public WeightPieces {
 public:
  CheckpointWeights(Checkpoint ck, const ParamLayout& L, const std::string& context)
      : ck_(std::move(ck)), pieces_(checkpoint_master_pieces(ck_, L, context)) {}
  const float* next(size_t begin, size_t count) override { return pieces_->next(begin, count); }
  void finish() override { pieces_->finish(); }
  const Checkpoint& checkpoint() const { return ck_; }

 private:
  Checkpoint ck_;
  std::unique_ptr<WeightPieces> pieces_;
};

}  // namespace

std::unique_ptr<WeightPieces> open_initial_weights(const Config& cfg, const ParamLayout& L, size_t vocab, InitialFp8* fp8) {
  const std::string& path = cfg.model.init_from;
  const std::string key = strcat("model.init_from (", cfg.origin.at("model.init_from"), ")");
  if (looks_like_gpt_weights(path)) {
    if (cfg.model.type != ModelType::Gpt)
      throw Error(ErrorKind::Config, strcat("config error: ", cfg.origin.at("model.init_from"), ": model.init_from: ", path,
                                            " holds GPT weights (safetensors or llm.c); this config builds an mlp"));
    if (fp8) fp8->why = strcat(path, " holds weights only (safetensors or llm.c), no FP8 scales");
    return open_gpt_weights(path, gpt_options(cfg, vocab), L, key);
  }
  // An amp_ddp checkpoint: its masters, when its layout is this model's.
  Checkpoint ck;
  try {
    ck = load_checkpoint_header(path);
  } catch (const Error& e) {
    std::string why = e.what();
    if (why.rfind("checkpoint error: ", 0) == 0) why = why.substr(18);
    throw Error(ErrorKind::Checkpoint, strcat("checkpoint error: ", key, ": not a safetensors file, an llm.c model file or ",
                                              "a readable amp_ddp checkpoint: ", why));
  }
  auto weights = std::make_unique<CheckpointWeights>(std::move(ck), L, key + ": ");  // checks the layout
  const Checkpoint& held = weights->checkpoint();
  // The same shapes compute another function with other heads (a GPT) or another activation (an
  // MLP; the GPT's is GELU): those weights would load and give another model's loss, which the
  // layout check cannot see.
  const std::map<std::string, std::string> now = config_values(cfg);
  const char* k = cfg.model.type == ModelType::Gpt ? "model.n_head" : "model.activation";
  if (const std::string then = checkpoint_fields::config_then(held, k); !then.empty() && then != now.at(k))
    throw Error(ErrorKind::Checkpoint, strcat("checkpoint error: ", key, ": ", path, " was trained with ", k, " ", then,
                                              ", this config has ", now.at(k), " (the same shapes, another function)"));
  if (fp8) {
    std::string why;
    fp8->scales = checkpoint_fp8_scales(held, fp8->tensors, &why, key + ": ");
    if (fp8->scales.empty()) fp8->why = strcat(path, " ", why);
  }
  return weights;
}

}  // namespace amp
