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
                       " per rank x ", world, " ranks) is larger than the ", n_samples, " training samples"));
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

const std::vector<uint32_t>& ShardedSampler::batch(int64_t step) {
  const int64_t epoch = step / int64_t(steps_per_epoch_);
  const size_t in_epoch = size_t(step % int64_t(steps_per_epoch_));
  if (epoch != epoch_) make_epoch(epoch);
  const size_t base = in_epoch * global_batch_ + size_t(rank_) * batch_;
  for (size_t i = 0; i < batch_; ++i) out_[i] = perm_[base + i];
  return out_;
}

}  // namespace amp
