#include "train/init_weights.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "model/make_model.h"
#include "model/weights_io.h"
#include "train/checkpoint.h"

namespace amp {

std::vector<float> read_initial_weights(const Config& cfg, const ParamLayout& L, size_t vocab) {
  const std::string& path = cfg.model.init_from;
  const std::string key = strcat("model.init_from (", cfg.origin.at("model.init_from"), ")");
  if (looks_like_gpt_weights(path)) {
    if (cfg.model.type != ModelType::Gpt)
      throw Error(ErrorKind::Config, strcat("config error: ", cfg.origin.at("model.init_from"), ": model.init_from: ", path,
                                            " holds GPT weights (safetensors or llm.c); this config builds an mlp"));
    return read_gpt_weights(path, gpt_options(cfg, vocab), L, key);
  }
  // An amp_ddp checkpoint: its masters, when its layout is this model's.
  Checkpoint ck;
  try {
    ck = load_checkpoint(path);
  } catch (const Error& e) {
    std::string why = e.what();
    if (why.rfind("checkpoint error: ", 0) == 0) why = why.substr(18);
    throw Error(ErrorKind::Checkpoint, strcat("checkpoint error: ", key, ": not a safetensors file, an llm.c model file or ",
                                              "a readable amp_ddp checkpoint: ", why));
  }
  auto bad = [&](const std::string& what) {
    throw Error(ErrorKind::Checkpoint, strcat("checkpoint error: ", key, ": ", path, ": ", what));
  };
  const auto layout = ck.header.find("layout");
  if (layout == ck.header.end() || !layout->is_array()) bad("its header has no layout");
  std::vector<std::string> theirs, ours;
  for (const auto& t : *layout)
    theirs.push_back(strcat(t.value("name", "?"), " [", t.value("rows", size_t(0)), ", ", t.value("cols", size_t(0)), "]"));
  for (const ParamInfo& t : L.tensors) ours.push_back(strcat(t.name, " [", t.rows, ", ", t.cols, "]"));
  for (size_t i = 0; i < std::max(theirs.size(), ours.size()); ++i)
    if (i >= theirs.size() || i >= ours.size() || theirs[i] != ours[i])
      bad(strcat("its tensor ", i, " is ", i < theirs.size() ? theirs[i] : "missing", ", this model's ",
                 i < ours.size() ? ours[i] : "missing", " (another model: check model.* against the run that wrote it)"));
  const auto master = ck.sections.find("master");
  if (master == ck.sections.end() || master->second.size() != L.total * sizeof(float))
    bad(strcat("its master section does not hold this model's ", L.total, " FP32 weights"));
  std::vector<float> w(L.total);
  std::memcpy(w.data(), master->second.data(), L.total * sizeof(float));
  return w;
}

}  // namespace amp
