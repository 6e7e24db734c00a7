#include "train/dry_run.h"

#include <algorithm>

#include "core/format.h"
#include "data/sampler.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "model/make_model.h"
#include "model/mlp.h"
#include "train/progress.h"

namespace amp {

namespace {

// The memory lines of a model of layout L whose forward passes hold rows samples (activations:
// act bytes, or at most act bytes where bound; fits: false when they overflow).
std::string memory_lines(const Config& cfg, int world, const ParamLayout& L, size_t rows, size_t act, bool fits,
                         bool bound = false) {
  const StateBytes s = model_state_bytes(cfg, L, cfg.precision.compute, world);
  if (!fits || s.overflow) return "# memory per rank: more than 16 EiB (the config is refused when it runs)\n";
  return strcat("# memory per rank: training state ", format_bytes(double(s.total())), " (masters ", format_bytes(double(s.masters)),
                ", moments ", format_bytes(double(s.moments)), ", working copy ", format_bytes(double(s.working)),
                ", gradients ", format_bytes(double(s.gradients)), "), activations at ", rows,
                cfg.model.type == ModelType::Gpt ? " windows " : " samples ", bound ? "at most " : "",
                format_bytes(double(act)), ": ", bound ? "at most " : "", format_bytes(double(s.total()) + double(act)),
                bound ? " (the bound the run's memory check uses; its start-up line gives what it allocates)" : "", "\n",
                // The same in bytes, for scripts (scripts/bench_zero.sh sizes the largest model that fits).
                "# memory per rank in bytes: state ", s.total(), bound ? " activations_at_most " : " activations ", act,
                bound ? " total_at_most " : " total ", s.total() + act, " gradients ", s.gradients, " working ",
                s.working, "\n");
}

// An MLP on synthetic data: its widths are in the config (data.synthetic.features, model.hidden,
// data.synthetic.outputs), and rank 0's forward passes hold what the trainer sizes them for. Its
// activations are the bound make_model checks (Mlp::activation_bytes), above what it allocates.
std::string synthetic_mlp_plan(const Config& cfg, int world) {
  const std::vector<size_t> dims =
      mlp_widths(cfg, size_t(cfg.data.synthetic.features), size_t(cfg.data.synthetic.outputs));
  size_t begin = 0, end = 0;
  eval_shard(size_t(cfg.data.synthetic.eval_samples), 0, world, begin, end);
  const size_t rows = std::max(size_t(cfg.data.batch_size), std::min(size_t(cfg.data.eval_batch_size), end - begin));
  size_t act = 0;
  if (!mlp_layout_fits(dims))
    return strcat("# parameters: more than 2^64 (", dims.size() - 1, " layers of widths ", dims.front(), "-...-", dims.back(), ")\n",
                  "# memory per rank: more than 16 EiB (the config is refused when it runs)\n");
  const bool fits = Mlp::activation_bytes(dims, rows, cfg.precision.compute, &act, cfg.precision.fp8);
  const ParamLayout L = mlp_layout(dims);
  return strcat("# parameters: ", format_count(double(L.n_params())), " (", L.n_params(), "; layer widths ",
                Mlp::widths_text(dims), ")\n") + memory_lines(cfg, world, L, rows, act, fits, true);
}

}  // namespace

std::string dry_run_plan(const Config& cfg, int world) {
  const int64_t batch = cfg.data.batch_size * cfg.data.grad_accum_steps * world;
  std::string out = strcat("# plan: ", world, " rank(s), global batch ", batch, " (", cfg.data.batch_size, " x ",
                           cfg.data.grad_accum_steps, " micro-batch(es) x ", world, " rank(s))\n");
  if (cfg.model.type != ModelType::Gpt && cfg.data.format == "synthetic") return out + synthetic_mlp_plan(cfg, world);
  if (cfg.model.type != ModelType::Gpt) return out + "# parameters and memory: known once the data is read (its features and outputs)\n";
  const size_t vocab = cfg.model.vocab_size > 0
                           ? size_t(cfg.model.vocab_size)
                           : size_t(tokenizer_vocab_size(data_tokenizer_name(cfg.data.tokenizer, cfg.data.format)));
  out += strcat("# tokens per optimizer step: ", format_count(double(batch) * double(cfg.model.seq_len)), " (", batch,
                " windows of ", cfg.model.seq_len, ")\n");
  if (vocab == 0) return out + "# parameters and memory: known once the token data is read (model.vocab_size 0: its largest token + 1)\n";
  const GptOptions o = gpt_options(cfg, vocab);
  const ParamLayout L = gpt_layout(o);
  size_t act = 0;
  // The largest forward pass: the training batch, or the evaluation batch where there is an
  // evaluation set (a run sizes the model the same way, its evaluation shard bounding the batch).
  const bool evaluates = !cfg.data.eval_tokens.empty() || cfg.data.eval_fraction > 0;
  const size_t rows = size_t(evaluates ? std::max(cfg.data.batch_size, cfg.data.eval_batch_size) : cfg.data.batch_size);
  const bool fits = Gpt::activation_bytes(o, rows, cfg.precision.compute, &act);
  out += strcat("# parameters: ", format_count(double(L.n_params())), " (", L.n_params(), "; vocabulary ", vocab, ")\n");
  return out + memory_lines(cfg, world, L, rows, act, fits);
}

}  // namespace amp
