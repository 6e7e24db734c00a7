#include "train/dry_run.h"

#include <algorithm>

#include "core/format.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "model/make_model.h"
#include "optim/state_bytes.h"
#include "train/progress.h"

namespace amp {

std::string dry_run_plan(const Config& cfg, int world) {
  const int64_t batch = cfg.data.batch_size * cfg.data.grad_accum_steps * world;
  std::string out = strcat("# plan: ", world, " rank(s), global batch ", batch, " (", cfg.data.batch_size, " x ",
                           cfg.data.grad_accum_steps, " micro-batch(es) x ", world, " rank(s))\n");
  if (cfg.model.type != ModelType::Gpt) return out + "# parameters and memory: known once the data is read (its features and outputs)\n";
  const size_t vocab = cfg.model.vocab_size > 0
                           ? size_t(cfg.model.vocab_size)
                           : size_t(tokenizer_vocab_size(data_tokenizer_name(cfg.data.tokenizer, cfg.data.format)));
  out += strcat("# tokens per optimizer step: ", format_count(double(batch) * double(cfg.model.seq_len)), " (", batch,
                " windows of ", cfg.model.seq_len, ")\n");
  if (vocab == 0) return out + "# parameters and memory: known once the token data is read (model.vocab_size 0: its largest token + 1)\n";
  const GptOptions o = gpt_options(cfg, vocab);
  const ParamLayout L = gpt_layout(o);
  const StateBytes s = state_bytes(estimated_state_shape(L.total, cfg.precision.compute, cfg.optimizer.params, world,
                                                         int(cfg.distributed.zero), cfg.data.grad_accum_steps > 1,
                                                         kShardAlign, L.spans(),
                                                         size_t(cfg.distributed.bucket_mb * kBytesPerMiB)));
  size_t act = 0;
  // The largest forward pass: the training batch, or the evaluation batch where there is an
  // evaluation set (a run sizes the model the same way, its evaluation shard bounding the batch).
  const bool evaluates = !cfg.data.eval_tokens.empty() || cfg.data.eval_fraction > 0;
  const size_t rows = size_t(evaluates ? std::max(cfg.data.batch_size, cfg.data.eval_batch_size) : cfg.data.batch_size);
  const bool fits = Gpt::activation_bytes(o, rows, cfg.precision.compute, &act) && !s.overflow;
  out += strcat("# parameters: ", format_count(double(L.n_params())), " (", L.n_params(), "; vocabulary ", vocab, ")\n");
  if (!fits) return out + "# memory per rank: more than 16 EiB (the config is refused when it runs)\n";
  out += strcat("# memory per rank: training state ", format_bytes(double(s.total())), " (masters ", format_bytes(double(s.masters)),
                ", moments ", format_bytes(double(s.moments)), ", working copy ", format_bytes(double(s.working)),
                ", gradients ", format_bytes(double(s.gradients)), "), activations at ", rows, " windows ",
                format_bytes(double(act)), ": ", format_bytes(double(s.total()) + double(act)), "\n");
  // The same in bytes, for scripts (scripts/bench_zero.sh sizes the largest model that fits).
  out += strcat("# memory per rank in bytes: state ", s.total(), " activations ", act, " total ", s.total() + act,
                " gradients ", s.gradients, " working ", s.working, "\n");
  return out;
}

}  // namespace amp
