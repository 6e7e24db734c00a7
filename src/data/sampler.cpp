#include "data/sampler.h"

#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace amp {

ShardedSampler::ShardedSampler(size_t n_samples, size_t per_rank_batch, int rank, int world, uint64_t seed,
                               bool shuffle)
    : n_(n_samples), batch_(per_rank_batch), global_batch_(per_rank_batch * size_t(world)),
      steps_per_epoch_(n_samples / (per_rank_batch * size_t(world))), rank_(rank), seed_(seed), shuffle_(shuffle) {
  if (steps_per_epoch_ == 0)
    throw Error(ErrorKind::Config,
                strcat("config error: data.batch_size: a global batch of ", global_batch_, " (", per_rank_batch,
                       " per rank x ", world, " ranks) is larger than the ", n_samples,
                       " training samples (per rank: data.batch_size x data.grad_accum_steps)"));
  out_.resize(batch_);
}

void ShardedSampler::make_epoch(int64_t epoch) {
  perm_.resize(n_);
  std::iota(perm_.begin(), perm_.end(), 0u);
  if (shuffle_) {
    Rng rng(mix_seed(seed_, uint64_t(epoch), 0x5A3D1E5ull));
    rng.shuffle(perm_);
  }
  epoch_ = epoch;
}

DataPosition ShardedSampler::position(int64_t step) const {
  AMP_CHECK(step >= base_step_, "sampler: step ", step, " before the resumed step ", base_step_);
  const uint64_t delta = uint64_t(step - base_step_);
  // Whole batches left in the epoch the run (re)started in, then whole epochs.
  const uint64_t first = base_.offset <= n_ ? (n_ - base_.offset) / global_batch_ : 0;
  if (delta < first) return DataPosition{base_.epoch, base_.offset + delta * global_batch_};
  const uint64_t rest = delta - first;
  return DataPosition{base_.epoch + 1 + int64_t(rest / steps_per_epoch_), (rest % steps_per_epoch_) * global_batch_};
}

double ShardedSampler::epochs_done(int64_t step) const {
  const DataPosition pos = position(step);
  return double(pos.epoch) + double(pos.offset) / double(n_);
}

int64_t ShardedSampler::step_at_epoch(int64_t epochs) const {
  if (base_.epoch >= epochs) return base_step_;  // already there (a resume at the end)
  const uint64_t first = base_.offset <= n_ ? (n_ - base_.offset) / global_batch_ : 0;
  return base_step_ + int64_t(first) + (epochs - base_.epoch - 1) * int64_t(steps_per_epoch_);
}

void ShardedSampler::resume_at(int64_t step, DataPosition pos) {
  AMP_CHECK(step >= 0 && pos.epoch >= 0, "sampler: resume at step ", step, ", epoch ", pos.epoch);
  base_step_ = step;
  base_ = pos;
}

const std::vector<uint32_t>& ShardedSampler::batch(int64_t step) {
  const DataPosition pos = position(step);
  if (pos.epoch != epoch_) make_epoch(pos.epoch);
  const size_t base = size_t(pos.offset) + size_t(rank_) * batch_;
  for (size_t i = 0; i < batch_; ++i) out_[i] = perm_[base + i];
  return out_;
}

}  // namespace amp
