// The training loop of one rank: data-parallel, mixed-precision steps with loss scaling, one global
// overflow flag and one shared scale (the step protocol of docs/design.md), periodic evaluation,
// cross-rank desync checks, progress output and run files.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "comm/grad_reducer.h"
#include "comm/mpi_communicator.h"
#include "config/config.h"
#include "data/load.h"
#include "data/sampler.h"
#include "model/mlp.h"
#include "optim/lr_schedule.h"
#include "train/checkpoint.h"
#include "train/metrics.h"
#include "train/progress.h"
#include "train/run_dir.h"

namespace amp {

// The step's scalars, kept in backend memory (device memory on GPUs).
struct StepScalarsDev {
  float loss_sum = 0;   // summed per-sample losses since the last log (this rank)
  int32_t correct = 0;  // classification hits since the last log (this rank)
  float norm_sq = 0;    // squared global norm of the last step's unscaled gradients
  float lr = 0;         // this step's learning rate (uploaded with the batch)
  ScalerState scaler;
};

// One rank's share of a half-finished log interval (checkpoints keep every rank's).
struct RankIntervalSums {
  float loss_sum = 0;
  int32_t correct = 0;
};

struct EvalResult {
  double loss = 0, accuracy = 0;
  size_t samples = 0;
};

class Trainer {
 public:
  Trainer(const Config& cfg, MpiCommunicator& world);
  ~Trainer();
  // Trains to the end; returns the process exit code.
  int run();

  // For tests: the FP32 master weights (host copy) and the layout.
  std::vector<float> master_weights();
  const ParamLayout& layout() const { return model_->layout(); }
  // For tests: called on every rank after every step with the step's scalars and reduced flags.
  using StepObserver = std::function<void(int64_t step, const StepScalarsDev&, const std::vector<int32_t>& flags)>;
  void set_step_observer(StepObserver f) { observer_ = std::move(f); }

 private:
  void setup();
  void setup_local();         // no collective inside: failures are agreed on at its end
  void check_ranks_agree();   // config and data digests compared across ranks
  void setup_output();        // rank 0: run folder lock, writability, metrics file
  void fail_setup_drill(const char* phase);
  void check_memory(const std::vector<size_t>& dims, size_t max_batch) const;
  void train_step(int64_t step);
  void take_comm_stats();
  void upload_inputs(int64_t step);  // host part: the batch and the learning rate
  void device_step(int64_t step);    // everything else; capturable into a CUDA graph
  void plant_fault(int64_t step, int tensor);
  void observe(int64_t step, bool force_log);
  void log_interval(int64_t step, const StepScalarsDev& now);  // now: the scalars observe() read
  EvalResult evaluate();
  void resume();                      // checkpoint.resume: load and apply on every rank
  void apply_checkpoint(const Checkpoint& ck, const std::string& path);
  void set_aside_newer_checkpoints(int64_t step);
  // Collective: every rank's interval sums go to rank 0, which writes; returns the path ("" on
  // other ranks). A failed write is an agreed Output error.
  std::string save(int64_t step);
  std::string write_checkpoint(int64_t step, const StepScalarsDev& scal, const std::vector<RankIntervalSums>& sums);
  // Why every rank stops after this step (agreed): 0 no, else a stop signal or an output failure.
  enum class Stop { None = 0, Signal = 1, OutputFailed = 2 };
  Stop stop_requested(int64_t step);
  void check_finite_weights(int64_t step);  // agreed Divergence error when a master weight is not finite
  void check_loss(int64_t step, double loss);  // non-finite or exploding training loss: Divergence
  void record_first_loss();
  void check_params_in_sync(int64_t step);
  // Collective: the ranks whose value differs from rank 0's ("1, 3"; "" when all agree).
  std::string ranks_differing_from_0(uint64_t mine, uint64_t* rank0);
  uint64_t params_hash();
  nlohmann::json summary_json(double wall_seconds, int64_t steps_done);
  std::string overflow_where(const ScalerState& s) const;

  const Config& cfg_;
  MpiCommunicator& world_;
  int rank_ = 0, nranks_ = 1;
  std::unique_ptr<Backend> be_;
  bool use_graph_ = false, graph_ready_ = false;
  DataSets data_;
  std::unique_ptr<ShardedSampler> sampler_;
  std::unique_ptr<Mlp> model_;
  std::unique_ptr<MetricsWriter> metrics_;
  std::vector<std::unique_ptr<RunDirLock>> locks_;  // rank 0: out_dir and checkpoint.dir
  std::unique_ptr<Progress> progress_;

  DType compute_ = DType::F16;
  bool classification_ = true;
  size_t batch_ = 0, n_out_ = 0;
  int64_t total_steps_ = 0;
  ScalerParams scaler_params_;
  OptimizerParams opt_params_;
  LrSchedule schedule_;
  std::vector<TensorSpan> spans_;
  std::vector<FaultSpec> my_faults_;

  // Backend memory.
  Buffer master_, lp_, grads_, g32_, state1_, state2_, scalars_, flags_, check_flag_;
  Buffer x_stage_, x_lp_, labels_, targets_;
  StepScalarsDev* dev_ = nullptr;
  int32_t* flags_dev_ = nullptr;

  // Declared after the buffers so that they go first on destruction: the reducer (its pending
  // requests), then the NCCL communicator (an abort must not wait behind buffer frees, which
  // synchronize the device), then the buffers, and the backend last.
  std::unique_ptr<Communicator> nccl_;  // device-buffer communicator when the backend has one
  Communicator* grad_comm_ = nullptr;   // gradients and overflow flags: nccl_ or the MPI world
  std::unique_ptr<GradReducer> reducer_;

  // Host bookkeeping.
  std::vector<float> x_host_;
  std::vector<int32_t> labels_host_;
  std::vector<float> targets_host_;
  StepScalarsDev seen_;              // last snapshot read from the backend
  int64_t interval_steps_ = 0;       // steps since the last log
  double interval_start_ = 0, interval_pause_ = 0, train_seconds_ = 0;
  double last_loss_ = 0, last_eval_loss_ = -1, last_eval_acc_ = -1;
  double first_loss_ = 0;            // the loss of step 1 (run.max_loss_ratio)
  uint64_t data_digest_ = 0;
  size_t max_batch_ = 0;             // rows of the activation and input buffers
  double comm_seconds_ = 0, exposed_seconds_ = 0;
  size_t comm_bytes_ = 0;
  int64_t comm_steps_ = 0, comm_measured_ = 0;
  double run_start_ = 0;
  int64_t start_step_ = 1;         // 1, or the step after the checkpoint resumed from
  std::string resumed_from_;
  StepObserver observer_;
};

}  // namespace amp
