#include "model/make_model.h"

#include "core/format.h"
#include "core/error.h"
#include "model/gpt.h"
#include "model/mlp.h"
#include "optim/state_bytes.h"

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

// The bytes a model needs on this rank: its activations at max_rows, and the training state of its
// parameters (optim/state_bytes.h). False on overflow.
struct Need {
  size_t activations = 0, state = 0, total = 0;
};
bool need(const Config& cfg, const ParamLayout& L, DType compute, int world, size_t activations, Need* n) {
  const StateBytes b = model_state_bytes(cfg, L, compute, world);
  n->activations = activations;
  n->state = b.total();
  return !b.overflow && !__builtin_add_overflow(activations, n->state, &n->total);
}

}  // namespace

StateBytes model_state_bytes(const Config& cfg, const ParamLayout& L, DType compute, int world) {
  return state_bytes(estimated_state_shape(L.total, compute, cfg.optimizer.params, world, int(cfg.distributed.zero),
                                           cfg.data.grad_accum_steps > 1, kShardAlign, L.spans(),
                                           size_t(cfg.distributed.bucket_mb * kBytesPerMiB)));
}

std::vector<size_t> mlp_widths(const Config& cfg, size_t inputs, size_t outputs) {
  std::vector<size_t> dims{inputs};
  for (int64_t h : cfg.model.hidden) dims.push_back(size_t(h));
  dims.push_back(outputs);
  return dims;
}

GptOptions gpt_options(const Config& cfg, size_t vocab) {
  GptOptions o;
  o.vocab = vocab;
  o.seq_len = size_t(cfg.model.seq_len);
  o.n_layer = size_t(cfg.model.n_layer);
  o.n_head = size_t(cfg.model.n_head);
  o.n_embd = size_t(cfg.model.n_embd);
  o.vocab_pad = vocab_pad_for(cfg.model.vocab_pad, o.vocab);
  o.recompute = cfg.model.recompute == "block";
  o.recompute_mlp = cfg.model.recompute == "mlp";
  o.recompute_attention = cfg.model.recompute == "attention";
  o.fused_attention = cfg.model.attention == "fused";
  o.sampling = cfg.sample.tokens > 0;
  o.fp8 = cfg.precision.fp8;
  // The padded LM head where the device may be a GPU (make_gpt asks the backend itself; a plan
  // made without one, --dry-run, counts its buffer unless run.device is cpu).
  o.pad_head = cfg.run.device != "cpu";
  return o;
}

namespace {

std::unique_ptr<Model> make_gpt(const Config& cfg, const Dataset& train, DeviceMemory& mem, ComputeOps& ops,
                                DType compute, size_t max_rows, int world, size_t bytes_available) {
  if (train.task != Task::LanguageModel)
    throw Error(ErrorKind::Config, strcat("config error: ", cfg.origin.at("model.type"),
                                          ": model.type: gpt trains on token data (data.format text or tokens)"));
  GptOptions o = gpt_options(cfg, size_t(train.vocab));
  o.pad_head = ops.prefers_padded_gemm();
  const ParamLayout L = gpt_layout(o);
  size_t activations = 0;
  Need n;
  const bool fits = Gpt::activation_bytes(o, max_rows, compute, &activations) &&
                    need(cfg, L, compute, world, activations, &n);
  if (!fits || (bytes_available > 0 && n.total > bytes_available)) {
    // Name what is too large. Where the activations dominate, what they grow with per window: the
    // logits (seq_len x vocabulary) or the blocks' (seq_len x layers x (width, and with explicit
    // attention heads x seq_len)). Else the parameters: the token embedding (vocabulary x width) or
    // the blocks' (layers x 12 width^2).
    const bool context = !fits || n.activations > n.state;
    const double T = double(o.seq_len), V = double(o.vocab), C = double(o.n_embd), layers = double(o.n_layer);
    const bool vocab = context ? T * V > T * layers * (16.0 * C + (o.fused_attention ? 0.0 : double(o.n_head) * T))
                               : V * C > layers * 12.0 * C * C;
    too_large(cfg, vocab ? "model.vocab_size" : context ? "model.seq_len" : "model.n_embd",
              strcat(o.n_layer, " layers x ", o.n_embd, " x vocab ", o.vocab, ", context ", o.seq_len,
                     context ? " (its activations dominate)" : ""),
              fits, L.n_params(), n.total, max_rows, bytes_available);
  }
  return std::make_unique<Gpt>(mem, ops, o, compute, max_rows);
}

}  // namespace

std::unique_ptr<Model> make_model(const Config& cfg, const Dataset& train, DeviceMemory& mem, ComputeOps& ops,
                                  DType compute, size_t max_rows, int world, size_t bytes_available) {
  if (cfg.model.type == ModelType::Gpt) return make_gpt(cfg, train, mem, ops, compute, max_rows, world, bytes_available);
  if (train.task == Task::LanguageModel)
    throw Error(ErrorKind::Config, strcat("config error: ", cfg.origin.at("model.type"),
                                          ": model.type: an mlp cannot train on token data; use model.type: gpt"));
  MlpOptions opt;
  opt.dims = mlp_widths(cfg, train.n_features, train.n_outputs());
  opt.activation = cfg.model.activation;
  opt.init = cfg.model.init;
  opt.init_std = cfg.model.init_std;
  opt.task = train.task;
  opt.fp8 = cfg.precision.fp8;

  size_t activations = 0;
  bool fits = mlp_layout_fits(opt.dims) && Mlp::activation_bytes(opt.dims, max_rows, compute, &activations, opt.fp8);
  const ParamLayout L = fits ? mlp_layout(opt.dims) : ParamLayout{};
  Need n;
  fits = fits && need(cfg, L, compute, world, activations, &n);
  if (!fits || (bytes_available > 0 && n.total > bytes_available))
    too_large(cfg, "model.hidden", strcat("layer widths ", opt.dims.front(), "-...-", opt.dims.back()), fits,
              L.n_params(), n.total, max_rows, bytes_available);
  return std::make_unique<Mlp>(mem, ops, std::move(opt), compute, max_rows);
}

}  // namespace amp
