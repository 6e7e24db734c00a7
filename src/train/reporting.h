// The run's reporting on rank 0: progress lines, out_dir/metrics.jsonl (one record per logged step,
// evaluation or telemetry sample), out_dir/summary.json, and the counters that checkpoints carry
// so that a resumed run reports exactly what the uninterrupted run would have.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "amp/mixed_precision.h"
#include "config/config.h"
#include "train/evaluation.h"
#include "train/metrics.h"
#include "train/progress.h"

namespace amp {

// Host counters of the run, kept in checkpoints.
struct RunRecord {
  int64_t interval_steps = 0;  // steps since the last log
  double first_loss = 0;       // the loss of step 1 (run.max_loss_ratio)
  double last_loss = std::nan("");  // the last logged mean training loss (NaN: none logged yet)
  double last_eval_loss = -1, last_eval_accuracy = -1;
  double train_seconds = 0;    // training time over every segment of the run, evaluations and checkpoints excluded
  double interval_seconds = 0;  // the part of it spent on the interval_steps (NaN: not known, an older checkpoint)
  double wall_seconds = 0;     // wall time of the run's earlier segments (processes before the last resume)
  // model.init_from: the params_hash of the weights the run started from (16 hex digits; "" when
  // not known: no model.init_from, or resumed from a checkpoint older than this record).
  std::string init_params_hash;
};

// What a log line reports beside the loss.
struct IntervalView {
  int64_t step = 0, total_steps = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  const ScalerState* scaler = nullptr;
  size_t global_batch = 0;
  double epoch = 0;  // epochs of data consumed after this step (ShardedSampler::epochs_done)
  uint64_t samples = 0;  // training samples consumed by the run (all ranks, every segment) after this step
  size_t tokens_per_sample = 0;  // language models: the tokens a sample trains on (0: not a language model)
};

class Reporter {
 public:
  Reporter(const Config& cfg, bool lead);
  Progress& progress() { return *progress_; }
  // Opens metrics.jsonl (appending after the checkpoint's step when resumed) and writes
  // out_dir/config.yaml. replaced_line: a roll-back's folder (CheckpointIO::set_aside_newer), which
  // receives the records after resumed_step.
  void open_metrics(int64_t resumed_step, const std::string& replaced_line = "");
  MetricsWriter& metrics() { return *metrics_; }
  const std::string& output_failure() const;  // "" while the run output is writable

  // Interval timing: pauses (evaluation, checkpoints) are kept out of the throughput.
  void start_interval();
  void pause(double seconds) { pause_ += seconds; }
  // Adds the training time since the interval started (or was last banked) to record.train_seconds
  // and record.interval_seconds: before a checkpoint is written and before the summary, so a run
  // stopped mid-interval counts every step's time and a resumed one knows its interval's.
  void bank(RunRecord& record);
  // One log line and record; advances record.train_seconds.
  void log(const IntervalView& v, RunRecord& record);
  // fp8 (precision.compute fp8): per FP8 tensor {"amax", "scale"}, written under "fp8"; null: none.
  void telemetry(int64_t step, float scale, const std::vector<GradStats>& stats, const std::vector<std::string>& names,
                 const nlohmann::json& fp8 = nullptr);
  void evaluation(int64_t step, const EvalResult& r, bool classification, const char* loss_name);
  // A text sample of a language model: printed, and recorded as {"step", "sample"}.
  void sample(int64_t step, const std::string& text);
  void message(const std::string& line) { progress_->message(line); }

 private:
  const Config& cfg_;
  bool lead_;
  std::unique_ptr<Progress> progress_;
  std::unique_ptr<MetricsWriter> metrics_;
  double interval_start_ = 0, pause_ = 0;
};

double now_seconds();
nlohmann::json finite_or_null(double v);

}  // namespace amp
