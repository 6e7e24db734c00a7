// The training run of one rank: set-up in agreed phases, then the loop (step, observe, evaluate,
// guard, checkpoint, stop). The parts that do the work are its members, one job each:
//   TrainStep     the step protocol, its state in backend memory and its CUDA graph (step.h)
//   CheckpointIO  what a checkpoint holds and how a run continues from one (checkpoint_io.h)
//   evaluate()    evaluation on this rank's shard (evaluation.h)
//   Reporter      progress, metrics.jsonl, summary.json (reporting.h)
//   Guards        agreed checks: same config/data/weights on every rank, divergence (guards.h)
//   Drills        the fault drills of the config (drills.h)
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "config/config.h"
#include "data/load.h"
#include "data/sampler.h"
#include "model/model.h"
#include "optim/lr_schedule.h"
#include "train/checkpoint_io.h"
#include "train/drills.h"
#include "train/guards.h"
#include "train/reporting.h"
#include "train/run_dir.h"
#include "train/step.h"

namespace amp {

class Trainer {
 public:
  Trainer(const Config& cfg, Communicator& world);
  ~Trainer();
  // Trains to the end; returns the process exit code.
  int run();

  // For tests: the FP32 master weights (host copy, every rank: its own where it holds them whole)
  // and the layout.
  std::vector<float> master_weights() { return step_->masters_everywhere(); }
  const ParamLayout& layout() const { return model_->layout(); }
  TrainStep& step() { return *step_; }  // for tests
  // For tests: called on every rank after every step with what the step left in backend memory
  // and the reduced flags of the step.
  struct StepObservation {
    ScalerState scaler;
    float norm_sq = 0;
    float loss_sum = 0;   // this rank's interval sums
    int32_t correct = 0;
  };
  using StepObserver = std::function<void(int64_t step, const StepObservation&, const std::vector<int32_t>& flags)>;
  void set_step_observer(StepObserver f) { observer_ = std::move(f); }

 private:
  void setup();
  void setup_local();   // no collective inside: failures are agreed on at its end
  void setup_output();  // rank 0: run folder lock, writability
  void establish_identity();  // rank 0: the run id, other runs' files moved aside (run_identity.h)
  bool overlap_buckets() const;
  void observe(int64_t step);
  void log_interval(int64_t step, const AmpScalars& now);
  void record_first_loss();
  // Loss terms this rank sums per step: batch x micro-batches x the model's terms per sample.
  int64_t loss_terms_per_step() const {
    return int64_t(batch_ * accum_) * int64_t(model_->loss_terms_per_sample());
  }
  void evaluate_now(int64_t step);
  bool stopped_in_setup();  // a stop signal during set-up: summary written, true (run() returns 0)
  void write_sample(int64_t step);
  std::vector<int32_t> sample_prompt() const;  // sample.prompt as tokens; Error(Config) beyond the vocabulary
  std::string save(int64_t step);  // guards the weights, then CheckpointIO::save
  // Why every rank stops after this step (agreed): 0 no, else a stop signal or an output failure.
  enum class Stop { None = 0, Signal = 1, OutputFailed = 2 };
  Stop stop_requested(int64_t step);
  nlohmann::json summary_json(double wall_seconds, int64_t steps_done);
  nlohmann::json fp8_report(const Fp8State& f) const;
  nlohmann::json fp8_telemetry(const Fp8State& f) const;
  uint64_t params_hash();
  uint64_t optimizer_state_hash();

  const Config& cfg_;
  Communicator& world_;
  int rank_ = 0, nranks_ = 1;
  DType compute_ = DType::F16;
  size_t batch_ = 0;   // samples per rank per micro-batch
  size_t accum_ = 1;   // micro-batches per step
  int64_t total_steps_ = 0;
  LrSchedule schedule_;
  DataSets data_;
  uint64_t data_digest_ = 0;
  std::unique_ptr<ShardedSampler> sampler_;
  Drills drills_;
  Reporter reporter_;
  // Rank 0: out_dir's and checkpoint.dir's locks. The checkpoint folder's goes first (members are
  // destroyed in reverse): a refused run removes the folders it made, the inner one first.
  std::unique_ptr<RunDirLock> out_lock_, ckpt_lock_;

  // Destroyed in reverse: the step (its graph, reducer, device communicator, then its buffers)
  // before the model's buffers, the backend last.
  std::unique_ptr<Backend> be_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Guards> guards_;
  std::unique_ptr<TrainStep> step_;
  std::unique_ptr<CheckpointIO> checkpoints_;

  RunRecord record_;
  AmpScalars seen_;  // the last mixed-precision scalars read from the backend
  int64_t start_step_ = 1;  // 1, or the step after the checkpoint resumed from
  std::string resumed_from_;
  std::string replaced_line_;  // rank 0, a roll-back: the folder of the line it replaces (set_aside_newer)
  std::string run_id_;  // rank 0
  double run_start_ = 0;
  StepObserver observer_;
  bool warned_no_tokenizer_ = false;
};

}  // namespace amp
