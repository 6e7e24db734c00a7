// Data-parallel batching: one seeded permutation per epoch, identical on every rank (as PyTorch's
// DistributedSampler); each global batch is split into contiguous per-rank slices, so N ranks x
// batch B see exactly the samples of 1 rank x batch N*B. Incomplete last batches are dropped.
// The position in the data is a pure function of the step and of where the run started: step 0
// at the first sample, or (a run resumed with another global batch) the position a checkpoint
// recorded; the epoch's remainder too small for a whole batch is dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace amp {

// Where the next global batch starts: an offset into the permutation of an epoch.
struct DataPosition {
  int64_t epoch = 0;
  uint64_t offset = 0;
};

class ShardedSampler {
 public:
  ShardedSampler(size_t n_samples, size_t per_rank_batch, int rank, int world, uint64_t seed, bool shuffle);
  size_t steps_per_epoch() const { return steps_per_epoch_; }
  size_t global_batch() const { return global_batch_; }
  // This rank's sample indices for 0-based global step `step` (epoch = step / steps_per_epoch).
  const std::vector<uint32_t>& batch(int64_t step);
  // Where the batch of 0-based step `step` starts (= where the data stands after `step` steps).
  DataPosition position(int64_t step) const;
  // Continue with 0-based step `step` at pos (a checkpoint's, written with any global batch).
  void resume_at(int64_t step, DataPosition pos);
  // Epochs of data consumed after `step` steps, as a fraction (epoch + offset / samples): what the
  // logs and checkpoints call the epoch, right across a change of the global batch.
  double epochs_done(int64_t step) const;
  // The number of steps after which `epochs` whole epochs are consumed (remainders too small for a
  // batch dropped), counted from the position the run started or resumed at: a run.epochs run's
  // length, whatever global batch wrote the checkpoint it resumed from.
  int64_t step_at_epoch(int64_t epochs) const;
  size_t samples() const { return n_; }

 private:
  void make_epoch(int64_t epoch);
  int64_t base_step_ = 0;
  DataPosition base_;
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
