// Checkpoint I/O of a run: what goes into a checkpoint (train/checkpoint.h is the file format) and
// how a run continues from one, bit for bit. Rank 0 writes and reads files; the other ranks send
// and receive the state over the communicator (no shared file system needed), a piece at a time:
// only rank 0 holds the whole state on the host. Every field is validated before it is used.
// The state is written as whole tensors (sharded state is sent to rank 0 first), so a
// checkpoint does not depend on the world size or on distributed.zero: a run may resume on
// another number of ranks, its data continuing from the position the checkpoint recorded.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "config/config.h"
#include "data/sampler.h"
#include "model/param_layout.h"
#include "train/checkpoint.h"
#include "train/drills.h"
#include "train/reporting.h"
#include "train/step.h"

namespace amp {

// One rank's share of a half-finished log interval (checkpoints keep every rank's).
struct RankIntervalSums {
  float loss_sum = 0;
  int32_t correct = 0;
};

class CheckpointIO {
 public:
  CheckpointIO(const Config& cfg, Communicator& world, TrainStep& step, const ParamLayout& layout, DType compute,
               ShardedSampler& sampler, Reporter& reporter, const Drills& drills);

  // Collective: every rank's interval sums go to rank 0, which writes; returns the path ("" on
  // other ranks). A failed write is an agreed Output error.
  std::string save(int64_t step, const RunRecord& record);
  // Training samples consumed (all ranks) after `step` steps of this line of runs.
  uint64_t samples_consumed(int64_t step) const;
  // The run's last step: run.steps, or the step at which run.epochs whole epochs are consumed from
  // the position the run started or resumed at (so a resume with another global batch trains the
  // epochs asked for, not the steps of the old batch).
  int64_t end_step() const;
  // checkpoint.resume (auto or a path): rank 0 finds, reads and checks the checkpoint to continue
  // and every rank receives it. Returns whether there is one (the same on every rank).
  bool locate();
  // Applies what locate() found on every rank. Returns the step resumed from (0: starting from
  // scratch, nothing found) and fills record and *from.
  int64_t resume(RunRecord& record, std::string* from);
  // Rank 0: the run id written into every checkpoint (run_identity.h).
  void set_run_id(std::string id) { run_id_ = std::move(id); }
  // The digest of the data this run trains and evaluates on (load.h dataset_digest), written into
  // every checkpoint: a resume on data that changed at the same paths says so.
  void set_data_digest(uint64_t digest) { data_digest_ = digest; }
  // Rank 0, after resuming from an older checkpoint than the folder's newest (a roll-back): this
  // run's newer checkpoints belong to the line it replaces and go to abandoned/<time>-step<N>/
  // (kept, never overwritten by a later roll-back), so resume=auto and checkpoint.keep follow the
  // new line. So does one at the resumed step itself that is not the file resumed from (the run
  // continued a copy from elsewhere). The line's summary.json and config copy go there too.
  // Returns that folder ("" when nothing moved), which receives its records after `step`.
  std::string set_aside_newer(int64_t step, const std::string& resumed_from);

 private:
  // Reads the next slot of the masters and moments (every rank, in order: `slot` must be that
  // one) to its end, handing its bytes to the sink (rank 0's file; null: read and dropped), and
  // rethrows the sink's first failure.
  using SlotSender = std::function<void(TrainStep::Slot slot, const ByteSink* sink)>;
  std::string write(int64_t step, const ScalerState& scaler, const std::vector<RankIntervalSums>& sums,
                    const RunRecord& record, uint64_t params_hash, const SlotSender& send);
  void check_header(const Checkpoint& ck, const std::string& path) const;  // rank 0, before sending
  void refuse_set_aside(const std::string& path) const;  // a resume path in abandoned/ or previous/
  // Continuing from a verified checkpoint (checkpoint_apply.cpp): validate every field, derive
  // what this run takes from it, then load.
  struct Resumed;
  // bytes: the checkpoint without its weights (every rank); then the weights from rank 0.
  void apply(const std::string& bytes, const std::string& path, RunRecord& record);
  Resumed validate(const Checkpoint& ck, const std::string& path) const;
  // Rank 0, in locate(): the weights' sections scanned as the file is verified (weight_stream),
  // then judged (validate_weights) once it verified.
  struct SectionScan {
    size_t first_nonfinite = SIZE_MAX, first_negative = SIZE_MAX;  // element indices (SIZE_MAX: none)
    float nonfinite = 0, negative = 0;                              // their values
  };
  SectionStream weight_stream();
  void validate_weights(const Checkpoint& ck, const std::string& path) const;
  void load_weights();  // collective
  void validate_fp8(const Checkpoint& ck, const std::string& path, Resumed& r) const;
  void derive(Resumed& r) const;
  void load(const Resumed& r, RunRecord& record);

  const Config& cfg_;
  Communicator& world_;
  TrainStep& step_;
  const ParamLayout& layout_;
  DType compute_;
  ShardedSampler& sampler_;
  int64_t resumed_step_ = 0;     // the step this run started after
  uint64_t samples_before_ = 0;  // training samples consumed (all ranks) up to resumed_step_
  Reporter& reporter_;
  const Drills& drills_;
  std::string run_id_;
  uint64_t data_digest_ = 0;
  // What locate() found: the checkpoint without its weights (its bytes, every rank), the
  // checkpoint (its weights left in its file) and its path (rank 0), what its weights hold.
  std::string located_rest_, located_path_;
  Checkpoint located_;
  std::map<std::string, SectionScan> scans_;
};

}  // namespace amp
