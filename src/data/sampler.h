// Data-parallel batching: one seeded permutation per epoch, identical on every rank (as PyTorch's
// DistributedSampler); each global batch is split into contiguous per-rank slices, so N ranks x
// batch B see exactly the samples of 1 rank x batch N*B. Incomplete last batches are dropped.
// The position in the data is a pure function of the step, so a resumed run needs no extra state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace amp {

class ShardedSampler {
 public:
  ShardedSampler(size_t n_samples, size_t per_rank_batch, int rank, int world, uint64_t seed, bool shuffle);
  size_t steps_per_epoch() const { return steps_per_epoch_; }
  size_t global_batch() const { return global_batch_; }
  // This rank's sample indices for 0-based global step `step` (epoch = step / steps_per_epoch).
  const std::vector<uint32_t>& batch(int64_t step);

 private:
  void make_epoch(int64_t epoch);
  size_t n_, batch_, global_batch_, steps_per_epoch_;
  int rank_;
  uint64_t seed_;
  bool shuffle_;
  int64_t epoch_ = -1;
  std::vector<uint32_t> perm_, out_;
};

// Contiguous shard [begin, end) of n evaluation samples for `rank` of `world`.
inline void eval_shard(size_t n, int rank, int world, size_t& begin, size_t& end) {
  begin = n * size_t(rank) / size_t(world);
  end = n * size_t(rank + 1) / size_t(world);
}

}  // namespace amp
