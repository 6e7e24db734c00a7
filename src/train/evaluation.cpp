#include "train/evaluation.h"

#include <algorithm>

#include "data/sampler.h"

namespace amp {

namespace {

// Evaluation accumulates into scalars of its own: the loss scale 1 (no gradients), loss, hits.
struct EvalScalars {
  float scale = 1.0f;
  float loss_sum = 0;
  int32_t correct = 0;
  int32_t pad_ = 0;
};

}  // namespace

EvalResult evaluate(Model& model, DeviceMemory& mem, const void* params, const Dataset& eval, size_t eval_batch,
                    Communicator& world, size_t max_batches) {
  EvalResult r;
  if (eval.n == 0) return r;
  size_t begin, end;
  eval_shard(eval.n, world.rank(), world.size(), begin, end);
  if (max_batches > 0 && (end - begin) / eval_batch >= max_batches) end = begin + max_batches * eval_batch;
  Buffer scal = mem.alloc(sizeof(EvalScalars));
  const EvalScalars init;
  mem.upload(scal.data(), &init, sizeof init);
  EvalScalars* es = scal.as<EvalScalars>();
  for (size_t b0 = begin; b0 < end; b0 += eval_batch) {
    const size_t nb = std::min(eval_batch, end - b0);
    model.stage(eval, nullptr, b0, nb);
    model.forward_loss(params, nb, &es->scale, 1.0f, false, LossSums{&es->loss_sum, &es->correct});
  }
  EvalScalars got;
  mem.download(&got, es, sizeof got);
  float f[3] = {got.loss_sum, float(got.correct), float(end - begin)};
  if (world.size() > 1) world.allreduce(view_of(f, 3), ReduceOp::Sum);
  r.samples = size_t(f[2]);
  const double denom = double(f[2]) * double(model.loss_terms_per_sample());
  r.loss = denom > 0 ? double(f[0]) / denom : 0.0;
  r.accuracy = model.classification() && f[2] > 0 ? double(f[1]) / double(f[2]) : 0.0;
  return r;
}

}  // namespace amp
