#include "train/eval_command.h"

#include <cmath>
#include <cstdio>

#include "backend/backend.h"
#include "comm/agree.h"
#include "core/error.h"
#include "data/load.h"
#include "data/sampler.h"
#include "model/make_model.h"
#include "train/evaluation.h"
#include "train/init_weights.h"
#include "train/rank_threads.h"
#include "train/signals.h"
#include "train/state_stream.h"
#include "train/working_weights.h"

namespace amp {

int run_eval(const Config& cfg, Communicator& world) {
  disarm_stop_signals();  // nothing to save: Ctrl-C or SIGTERM ends an evaluation at once
  const int rank = world.rank(), nranks = world.size();
  std::unique_ptr<Backend> be;
  DataSets data;
  std::unique_ptr<Model> model;
  const size_t eval_batch = size_t(cfg.data.eval_batch_size);
  run_agreed(world, [&] {
    if (cfg.model.init_from.empty())
      throw Error(ErrorKind::Config, "config error: model.init_from: eval needs the weights to evaluate: --set "
                                     "model.init_from=PATH (an amp_ddp checkpoint, a safetensors or an llm.c model file)");
    be = make_backend(cfg.run.device, world.local_rank(), pick_threads(cfg.run.threads, world.local_size()));
    data = load_datasets(cfg, DataUse::EvaluationOnly);
    if (data.eval.n == 0) {
      // Where it was said: data.eval_fraction where given (a --set of 0, say), else the data
      // section; and what gives this data format an evaluation set.
      const std::string& f = cfg.data.format;
      const char* key = cfg.given("data.eval_fraction") ? "data.eval_fraction" : "data.format";
      const std::string where = cfg.given(key) ? strcat(cfg.origin.at(key), ": ", key, ": ") : std::string();
      const char* give = f == "tokens"      ? "data.eval_tokens (token shards) or data.eval_fraction"
                         : f == "idx"       ? "data.eval_images and data.eval_labels"
                         : f == "csv"       ? "data.eval_csv or data.eval_fraction"
                         : f == "synthetic" ? "data.synthetic.eval_samples"
                                            : "data.eval_fraction";
      throw Error(ErrorKind::Config, strcat("config error: ", where, "the config has no evaluation set: give ", give));
    }
    size_t begin = 0, end = 0;
    eval_shard(data.eval.n, rank, nranks, begin, end);
    model = make_model(cfg, data.train, be->memory(), be->ops(), cfg.precision.compute,
                       std::max<size_t>(1, std::min(eval_batch, end - begin)), nranks,
                       be->memory().memory_available(world.local_size()));
  });
  const ParamLayout& L = model->layout();
  std::unique_ptr<WeightPieces> w;
  InitialFp8 fp8{model->fp8_tensors(), {}, {}};
  run_agreed(world, [&] {
    if (rank == 0) w = open_initial_weights(cfg, L, size_t(data.train.vocab), &fp8);
  });
  // Every rank evaluates with the whole model, read by rank 0 and sent a piece at a time: no rank
  // holds the FP32 weights whole on the host.
  WorkingWeights weights(*be, L.total, cfg.precision.compute);
  broadcast_pieces(world, w.get(), L.total, [&](size_t begin, const float* v, size_t count) { weights.load(begin, v, count); });
  w.reset();
  // FP8 compute: the scales the checkpoint's run ended with, on every rank; without them, bf16.
  int32_t n_scales = int32_t(fp8.scales.size());
  world.broadcast(view_of(&n_scales, 1), 0);
  fp8.scales.resize(size_t(n_scales));
  if (n_scales > 0) world.broadcast(view_of(fp8.scales.data(), fp8.scales.size()), 0);
  const std::unique_ptr<FixedFp8Scales> scales =
      n_scales > 0 ? std::make_unique<FixedFp8Scales>(*be, *model, fp8.scales, cfg.precision.fp8_params.native_gemm)
                   : nullptr;
  if (rank == 0 && !fp8.tensors.empty() && !scales)
    std::fprintf(stderr, "note: precision.compute fp8: %s; evaluating in bf16\n", fp8.why.c_str());
  const EvalResult r = evaluate(*model, be->memory(), weights.params(), data.eval, eval_batch, world, size_t(cfg.run.eval_iters));
  // Every rank has the reduced loss: a non-finite one ends every rank alike (finite weights can
  // still overflow, in the compute precision or in FP32).
  if (!std::isfinite(r.loss))
    throw Error(ErrorKind::Divergence,
                strcat("eval: the weights of ", cfg.model.init_from, " give a non-finite loss (", r.loss, ") on ",
                       data.eval.source, " in ", precision_name(cfg.precision.compute), " compute"), true);
  if (rank == 0) {
    const size_t per = model->loss_terms_per_sample();
    const std::string what = model->language_model()
                                 ? strcat("perplexity ", std::exp(r.loss), " | ", r.samples, " window(s) x ", per,
                                          " tokens = ", r.samples * per, " tokens")
                                 : strcat(model->classification() ? strcat("accuracy ", r.accuracy, " | ") : std::string(),
                                          r.samples, " samples");
    std::printf("eval loss %.6f | %s of %s | weights %s | %s compute | %d rank(s)\n", r.loss, what.c_str(),
                data.eval.source.c_str(), cfg.model.init_from.c_str(),
                scales ? "fp8" : precision_name(cfg.precision.compute), nranks);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace amp
