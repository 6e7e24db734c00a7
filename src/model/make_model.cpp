#include "model/make_model.h"

#include "core/format.h"
#include "core/error.h"
#include "model/gpt.h"
#include "model/mlp.h"

namespace amp {

namespace {

[[noreturn]] void too_large(const Config& cfg, const char* key, const std::string& what, bool fits, size_t params,
                            size_t bytes, size_t max_rows, size_t bytes_available) {
  const std::string need = !fits ? std::string("more than 16 EiB") : format_bytes(double(bytes));
  throw Error(ErrorKind::Config,
              strcat("config error: ", cfg.origin.at(key), ": ", key, ": a model of ", what, " (",
                     !fits ? std::string("overflowing") : std::to_string(params), " parameters) at batch ", max_rows,
                     " needs ", need, " per rank; this rank may use ", format_bytes(double(bytes_available)),
                     "; make the model or data.batch_size / data.eval_batch_size smaller"));
}

// Gradient accumulation's FP32 sum of the gradients (TrainStep): 4 more bytes per parameter.
bool add_accumulation(const Config& cfg, size_t params, size_t* bytes) {
  if (cfg.data.grad_accum_steps <= 1) return true;
  size_t extra = 0;
  return !__builtin_mul_overflow(params, size_t(4), &extra) && !__builtin_add_overflow(*bytes, extra, bytes);
}

std::unique_ptr<Model> make_gpt(const Config& cfg, const Dataset& train, DeviceMemory& mem, ComputeOps& ops,
                                DType compute, size_t max_rows, size_t bytes_available) {
  if (train.task != Task::LanguageModel)
    throw Error(ErrorKind::Config, strcat("config error: ", cfg.origin.at("model.type"),
                                          ": model.type: gpt trains on token data (data.format text or tokens)"));
  GptOptions o;
  o.vocab = size_t(train.vocab);
  o.seq_len = size_t(cfg.model.seq_len);
  o.n_layer = size_t(cfg.model.n_layer);
  o.n_head = size_t(cfg.model.n_head);
  o.n_embd = size_t(cfg.model.n_embd);
  o.vocab_pad = vocab_pad_for(cfg.model.vocab_pad, o.vocab);
  size_t bytes = 0, params = 0;
  const bool fits = Gpt::bytes_needed(o, max_rows, compute, &bytes, &params) && add_accumulation(cfg, params, &bytes);
  if (!fits || (bytes_available > 0 && bytes > bytes_available)) {
    // Name what is too large: the context (activations grow with batch x seq_len x (width + heads x
    // seq_len)) or the width (the parameters' training state).
    const double state = double(params) * double(4 + 4 + 8 + 2 * dtype_size(compute));
    const bool activations = !fits || double(bytes) - state > state;
    too_large(cfg, activations ? "model.seq_len" : "model.n_embd",
              strcat(o.n_layer, " layers x ", o.n_embd, " x vocab ", o.vocab, ", context ", o.seq_len,
                     activations ? " (its activations dominate)" : ""),
              fits, params, bytes, max_rows, bytes_available);
  }
  return std::make_unique<Gpt>(mem, ops, o, compute, max_rows);
}

}  // namespace

std::unique_ptr<Model> make_model(const Config& cfg, const Dataset& train, DeviceMemory& mem, ComputeOps& ops,
                                  DType compute, size_t max_rows, size_t bytes_available) {
  if (cfg.model.type == "gpt") return make_gpt(cfg, train, mem, ops, compute, max_rows, bytes_available);
  if (train.task == Task::LanguageModel)
    throw Error(ErrorKind::Config, strcat("config error: ", cfg.origin.at("model.type"),
                                          ": model.type: an mlp cannot train on token data; use model.type: gpt"));
  MlpOptions opt;
  opt.dims.push_back(train.n_features);
  for (int64_t h : cfg.model.hidden) opt.dims.push_back(size_t(h));
  opt.dims.push_back(train.n_outputs());
  opt.activation = cfg.model.activation;
  opt.init = cfg.model.init;
  opt.init_std = cfg.model.init_std;
  opt.task = train.task;

  size_t bytes = 0, params = 0;
  const bool fits =
      Mlp::bytes_needed(opt.dims, max_rows, compute, &bytes, &params) && add_accumulation(cfg, params, &bytes);
  if (!fits || (bytes_available > 0 && bytes > bytes_available))
    too_large(cfg, "model.hidden", strcat("layer widths ", opt.dims.front(), "-...-", opt.dims.back()), fits, params,
              bytes, max_rows, bytes_available);
  return std::make_unique<Mlp>(mem, ops, std::move(opt), compute, max_rows);
}

}  // namespace amp
