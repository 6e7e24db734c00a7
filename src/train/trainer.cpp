#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "comm/agree.h"
#include "comm/watchdog.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/host_memory.h"
#include "data/tokenizer.h"
#include "model/sampling.h"
#include "train/sample_text.h"
#include "train/signals.h"

namespace amp {

std::string Trainer::save(int64_t step) {
  // Never write a checkpoint that holds NaN weights.
  guards_->check_finite_weights(step, step_->master_data(), step_->master_spans(), step_->master_count());
  RunRecord r = record_;
  r.wall_seconds += now_seconds() - run_start_;  // the wall time up to here, for the segment that resumes
  return checkpoints_->save(step, r);
}

Trainer::Stop Trainer::stop_requested(int64_t step) {
  drills_.raise_signal(step);
  drills_.await_signal(step);
  int32_t why = !reporter_.output_failure().empty()                ? int32_t(Stop::OutputFailed)
                : cfg_.checkpoint.on_signal && stop_signal() != 0 ? int32_t(Stop::Signal)
                                                                  : int32_t(Stop::None);
  if (nranks_ > 1) world_.allreduce(BufView{&why, 1, DType::I32}, ReduceOp::Max);
  return Stop(why);
}

// The loss of step 1, before any update: what run.max_loss_ratio compares with. Read once, right
// after step 1 (the interval sums hold only that step then).
void Trainer::record_first_loss() {
  const StepSums now = step_->read_sums();
  float sums[2] = {now.loss_sum, float(loss_terms_per_step())};
  if (nranks_ > 1) world_.allreduce(view_of(sums, 2), ReduceOp::Sum);
  record_.first_loss = double(sums[0]) / double(sums[1]);
}

uint64_t Trainer::params_hash() { return step_->masters_hash(); }

// The optimizer moments as whole tensors (gathered when sharded; 0 when the optimizer has none).
uint64_t Trainer::optimizer_state_hash() {
  uint64_t h = 0;
  for (int which : {1, 2})
    if (step_->has_state(which)) h = h * 1099511628211ull ^ step_->state_hash(which);
  return h;
}

// Reads the mixed-precision scalars (every step where that is free, only at log and telemetry
// steps on device backends), reports skipped steps and stops a diverged run.
void Trainer::observe(int64_t step) {
  const bool log_step = step % cfg_.run.log_interval == 0 || step == total_steps_;
  const bool telemetry = cfg_.precision.telemetry_interval > 0 && step % cfg_.precision.telemetry_interval == 0;
  if (!log_step && !telemetry && !be_->memory().host_accessible()) return;
  const MixedPrecision& amp = step_->amp();
  const AmpScalars now = amp.read();
  if (rank_ == 0)
    if (const std::string skips = amp.skip_report(seen_.scaler, now.scaler); !skips.empty()) reporter_.message(skips);
  amp.check_divergence(now.scaler, cfg_.precision.divergence_steps);
  if (telemetry)
    reporter_.telemetry(step, now.scaler.scale, amp.grad_stats(step_->gradients()), amp.tensor_names(),
                        amp.fp8() ? fp8_telemetry(*amp.fp8()) : nlohmann::json());
  seen_ = now;
  if (log_step) log_interval(step, now);
}

void Trainer::log_interval(int64_t step, const AmpScalars& now) {
  // Mean training loss over the interval, over every rank's samples.
  const StepSums s = step_->read_sums();
  float sums[2] = {s.loss_sum,
                   float(record_.interval_steps * loss_terms_per_step())};
  if (nranks_ > 1) world_.allreduce(view_of(sums, 2), ReduceOp::Sum);
  step_->clear_sums();
  const double loss = sums[1] > 0 ? double(sums[0]) / double(sums[1]) : 0.0;
  record_.last_loss = loss;
  IntervalView v;
  v.step = step;
  v.total_steps = total_steps_;
  v.loss = loss;
  v.lr = schedule_.at(step);
  v.grad_norm = std::sqrt(double(now.norm_sq));
  v.scaler = &now.scaler;
  v.global_batch = sampler_->global_batch();
  v.epoch = sampler_->epochs_done(step);
  v.samples = checkpoints_->samples_consumed(step);
  v.tokens_per_sample = model_->language_model() ? model_->loss_terms_per_sample() : 0;
  reporter_.log(v, record_);
  record_.interval_steps = 0;
  guards_->check_loss(step, loss, record_.first_loss, model_->uniform_loss());
  guards_->check_finite_weights(step, step_->master_data(), step_->master_spans(), step_->master_count());
  reporter_.start_interval();
}

// A stop signal that came during set-up (on any rank): stop before the first step, exit 0. Nothing
// was trained, so there is nothing to checkpoint; the summary says where the run stands.
bool Trainer::stopped_in_setup() {
  int32_t any = cfg_.checkpoint.on_signal && stop_signal() != 0 ? 1 : 0;
  if (nranks_ > 1) world_.allreduce(BufView{&any, 1, DType::I32}, ReduceOp::Max);
  if (!any || start_step_ > total_steps_) return false;
  reporter_.progress().finish();
  nlohmann::json summary = summary_json(now_seconds() - run_start_, start_step_ - 1);
  summary["stopped_early"] = true;
  summary["stop_signal"] = signal_name(stop_signal() ? stop_signal() : SIGTERM);
  if (!resumed_from_.empty()) summary["checkpoint"] = resumed_from_;
  run_agreed(world_, [&] { reporter_.metrics().write_summary(summary); });
  if (rank_ == 0)
    reporter_.message(strcat("stop requested (", summary["stop_signal"].get<std::string>(), ") during set-up: stopped before step ",
                             start_step_, resumed_from_.empty() ? std::string(", nothing trained")
                                                                : "; run again with checkpoint.resume=auto to continue"));
  return true;
}

void Trainer::evaluate_now(int64_t step) {
  const EvalResult r = evaluate(*model_, be_->memory(), step_->working_params(), data_.eval,
                                size_t(cfg_.data.eval_batch_size), world_, size_t(cfg_.run.eval_iters));
  record_.last_eval_loss = r.loss;
  record_.last_eval_accuracy = r.accuracy;
  reporter_.evaluation(step, r, model_->classification(), model_->loss_name());
}

// sample.prompt as tokens of the data's tokenizer (none: token ids). A token the model's
// vocabulary does not hold (a byte above model.vocab_size) is a config error, found at start-up.
std::vector<int32_t> Trainer::sample_prompt() const {
  return encode_prompt(data_.train.tokenizer, cfg_.sample.prompt, int32_t(data_.train.vocab),
                       cfg_.origin.at("sample.prompt"), "sample.prompt");
}

// Rank 0 continues sample.prompt with the model (language models only; no collective inside). The
// prompt is encoded and the sample decoded with the data's tokenizer; token data without one reads
// the prompt as token ids and prints ids, and says so once.
void Trainer::write_sample(int64_t step) {
  if (!model_->language_model() || rank_ != 0 || cfg_.sample.tokens <= 0) return;
  const int32_t vocab = int32_t(data_.train.vocab);
  const std::vector<int32_t> prompt = sample_prompt();
  if (!make_tokenizer(data_.train.tokenizer) && !warned_no_tokenizer_) {
    reporter_.message(strcat("note: the token data names no tokenizer: samples print token ids, and sample.prompt is ",
                             "token ids separated by spaces", prompt.size() == 1 && prompt[0] == vocab - 1
                                                                     ? strcat(" (from token ", vocab - 1, " here)")
                                                                     : std::string()));
    warned_no_tokenizer_ = true;
  }
  SampleOptions o;
  o.tokens = size_t(cfg_.sample.tokens);
  o.temperature = cfg_.sample.temperature;
  o.top_k = size_t(cfg_.sample.top_k);
  o.top_p = cfg_.sample.top_p;
  o.seed = uint64_t(cfg_.sample.seed);
  const void* params = step_->working_params();
  // A stop signal ends the sample where it is (its step is done and checkpointed before it).
  const auto stopping = [&] { return cfg_.checkpoint.on_signal && stop_signal() != 0; };
  const std::unique_ptr<TokenDecoder> decoder = model_->decoder(params);
  const std::vector<int32_t> out = generate(
      prompt, o, [&](const std::vector<int32_t>& context) { return decoder->next_logits(context); }, stopping);
  const std::string text = decode_sample(data_.train.tokenizer, out);
  if (out.size() < prompt.size() + o.tokens)
    reporter_.message(strcat("note: the sample at step ", step, " was cut short after ", out.size() - prompt.size(), " of ",
                             o.tokens, " tokens by ", signal_name(stop_signal())));
  reporter_.sample(step, text);
}

// precision.compute fp8, telemetry: per FP8 tensor its scale for the next step and its newest amax
// (absent before any step was recorded, as in fp8_report).
nlohmann::json Trainer::fp8_telemetry(const Fp8State& f) const {
  const Fp8State::Host h = f.read();
  nlohmann::json j = nlohmann::json::object();
  for (int t = 0; t < f.count(); ++t) {
    nlohmann::json& e = j[f.tensors()[size_t(t)].name];
    e["scale"] = h.scales[size_t(t)];
    if (h.meta.recorded > 0) e["amax"] = f.newest_amax(h, t);
  }
  return j;
}

// precision.compute fp8: per FP8 tensor its format, scale and newest amax, and what this process's
// training casts did to its values (shares of the values cast: flushed to zero, saturated); the
// shares are absent when nothing was cast (a run resumed at its last step).
nlohmann::json Trainer::fp8_report(const Fp8State& f) const {
  const Fp8State::Host h = f.read();
  const std::vector<Fp8Counts> counts = f.read_counts();
  nlohmann::json tensors = nlohmann::json::array();
  for (int t = 0; t < f.count(); ++t) {
    const Fp8Tensor& ft = f.tensors()[size_t(t)];
    const Fp8Counts& c = counts[size_t(t)];
    nlohmann::json e = {{"name", ft.name},
                        {"format", fp8_name(ft.format)},
                        {"scale", h.scales[size_t(t)]}};
    if (h.meta.recorded > 0) e["amax"] = f.newest_amax(h, t);
    if (c.elements > 0) {
      e["flushed_share"] = double(c.flushed) / double(c.elements);
      e["saturated_share"] = double(c.saturated) / double(c.elements);
    }
    tensors.push_back(e);
  }
  const Fp8Params& p = f.params();
  return {{"scaling", p.delayed ? "delayed" : "none"},
          {"amax_history", p.history},
          {"amax_compute", p.algo == AmaxAlgo::Max ? "max" : "most_recent"},
          {"margin", p.margin},
          {"steps_recorded", h.meta.recorded},
          {"tensors", tensors}};
}

nlohmann::json Trainer::summary_json(double wall_seconds, int64_t steps_done) {
  const AmpScalars now = step_->amp().read();
  step_->take_comm_stats();  // the read waited for the device: the last step is measured
  const bool classification = model_->classification();
  const uint64_t samples = checkpoints_->samples_consumed(steps_done);
  // Every segment of the run (processes before a resume included): the run's mean throughput.
  nlohmann::json j = {
      {"version", AMP_VERSION},
      {"run_id", run_id_},
      {"backend", be_->name()},
      {"precision", compute_name(cfg_)},
      {"loss_scale_mode", scale_mode_name(cfg_.precision.scaler.mode)},
      {"world_size", nranks_},
      {"global_batch", sampler_->global_batch()},
      {"steps", steps_done},
      {"epochs", sampler_->epochs_done(steps_done)},
      {"samples", samples},
      {"skipped_steps", now.scaler.overflow_steps},
      {"optimizer_steps", now.scaler.optimizer_steps},
      {"final_scale", now.scaler.scale},
      {"growth_tracker", now.scaler.growth_tracker},
      {"train_seconds", record_.train_seconds},
      {"wall_seconds", record_.wall_seconds + wall_seconds},
      {"model", model_->describe()},
      {"params", model_->layout().n_params()},
      {"params_hash", hex64(params_hash())},
      {"zero", step_->sharded() ? cfg_.distributed.zero : 0},
      {"optimizer_state_hash", hex64(optimizer_state_hash())},
      {"config_hash", hex64(config_hash(cfg_))},
      {"memory_per_rank", {{"training_state", step_->state_bytes().total()}, {"activations", model_->buffer_bytes()},
                           {"rows_per_forward", model_->max_rows()}}},
  };
  // Peak resident host memory (with the CPU backend, the training state and activations among the
  // rest): rank 0's (it reads and writes the checkpoints) and the largest of the other ranks';
  // absent where /proc does not say.
  const uint64_t peak = host_peak_resident();
  std::vector<uint64_t> peaks(static_cast<size_t>(nranks_));
  world_.allgather(&peak, peaks.data(), sizeof peak);
  if (peaks[0] > 0) j["peak_resident_bytes_rank0"] = peaks[0];
  if (nranks_ > 1 && std::count(peaks.begin() + 1, peaks.end(), uint64_t(0)) == 0)
    j["peak_resident_bytes_other_ranks"] = *std::max_element(peaks.begin() + 1, peaks.end());
  // distributed.zero 2: the gradient buffer's resident bytes, counted (the bound of state_bytes)
  // and measured (its high-water mark when a tensor completed; absent where not measured).
  if (step_->gradient_window_bytes() > 0) {
    j["zero2_gradient_buffer_rank0"] = {{"counted", step_->gradient_window_bytes()}};
    if (step_->gradient_resident_peak() > 0) j["zero2_gradient_buffer_rank0"]["measured_peak"] = step_->gradient_resident_peak();
  }
  if (!cfg_.model.init_from.empty()) {
    j["init_from"] = {{"path", cfg_.model.init_from}};
    if (!record_.init_params_hash.empty()) j["init_from"]["params_hash"] = record_.init_params_hash;  // else not known
  }
  if (const Fp8State* f = step_->amp().fp8()) j["fp8"] = fp8_report(*f);
  // What was not measured is absent (never 0): no loss logged (stopped before the first log line,
  // or resumed at the last step), no evaluation, no training time.
  if (std::isfinite(record_.last_loss)) j["final_loss"] = record_.last_loss;
  if (record_.last_eval_loss >= 0) j["eval_loss"] = record_.last_eval_loss;
  if (classification && record_.last_eval_accuracy >= 0) j["eval_accuracy"] = record_.last_eval_accuracy;
  if (record_.train_seconds > 0) {
    j["samples_per_second"] = double(samples) / record_.train_seconds;
    // A language model's sample is a window of seq_len tokens, each a loss term.
    if (model_->language_model())
      j["tokens_per_second"] = double(samples) * double(model_->loss_terms_per_sample()) / record_.train_seconds;
  }
  const StateBytes& b = step_->state_bytes();
  j["state_bytes_per_rank"] = {{"masters", b.masters},     {"moments", b.moments},    {"working_copy", b.working},
                               {"gradients", b.gradients}, {"total", b.total()}};
  const TrainStep::CommTotals& c = step_->comm_totals();
  if (nranks_ > 1 && c.steps > 0) {
    const double per_step = c.seconds / double(c.steps);
    const double exposed = c.exposed_seconds / double(c.steps);
    j[step_->sharded() ? "reduce_scatter_bytes_per_step" : "allreduce_bytes_per_step"] = c.bytes_per_step;
    if (step_->sharded()) j["allgather_bytes_per_step"] = c.gathered_bytes_per_step;
    if (c.gathers_awaited_by_forward + c.gathers_settled > 0)  // overlapped all-gathers ran
      j["allgather_buckets_overlapped"] = {{"awaited_by_forward", c.gathers_awaited_by_forward},
                                           {"settled_by_other_readers", c.gathers_settled}};
    j["comm_seconds_per_step"] = per_step;
    j["comm_exposed_seconds_per_step"] = exposed;
    if (per_step > 0) j["comm_hidden_share"] = std::max(0.0, 1.0 - exposed / per_step);  // absent: nothing to hide
  }
  return j;
}

int Trainer::run() {
  const bool lead = rank_ == 0;
  reporter_.start_interval();
  std::string last_saved;
  if (stopped_in_setup()) return 0;
  for (int64_t step = start_step_; step <= total_steps_; ++step) {
    step_->run(step, start_step_, data_.train, sampler_->batch(step - 1), float(schedule_.at(step)));
    ++record_.interval_steps;
    if (step == 1) record_first_loss();
    if (drills_.corrupts_at(step))  // (asking for the weights waits for their all-gather)
      drills_.corrupt_params(step, be_->memory(), step_->replica_data(), step_->replica_dtype());
    if (observer_) {
      const AmpScalars a = step_->amp().read();
      const StepSums sums = step_->read_sums();
      observer_(step, StepObservation{a.scaler, a.norm_sq, sums.loss_sum, sums.correct}, step_->amp().read_flags());
    }
    {
      Watchdog::Detail detail;
      detail.note = "waits for the device and its NCCL collectives";
      Watchdog::Wait wait(be_->memory().host_accessible() ? nullptr : world_.watchdog(), "reading the step's results", detail);
      observe(step);
    }
    const bool epoch_end = sampler_->position(step).offset == 0;  // the next batch starts an epoch
    const bool do_eval = cfg_.run.eval_interval > 0 ? step % cfg_.run.eval_interval == 0 || step == total_steps_
                                                     : epoch_end || step == total_steps_;
    const bool do_hash = nranks_ > 1 && ((cfg_.distributed.hash_interval > 0 && step % cfg_.distributed.hash_interval == 0) ||
                                         step == total_steps_);
    const bool do_ckpt = (cfg_.checkpoint.interval > 0 && step % cfg_.checkpoint.interval == 0) ||
                         (cfg_.checkpoint.final && step == total_steps_);
    const bool do_sample = (cfg_.run.sample_interval > 0 && step % cfg_.run.sample_interval == 0) || step == total_steps_;
    if (do_eval || do_hash || do_ckpt || do_sample) {
      reporter_.bank(record_);          // the steps' time so far, for the checkpoint
      const double t0 = now_seconds();  // kept out of the throughput numbers
      if (do_hash) guards_->check_params_in_sync(step, step_->replica_hash());
      if (do_hash && step_->amp().fp8()) guards_->check_fp8_in_sync(step, step_->fp8_hash());
      if (do_eval && data_.eval.n > 0) evaluate_now(step);
      if (do_ckpt) {
        last_saved = save(step);
        if (lead) reporter_.message(strcat("checkpoint step ", step, " -> ", last_saved));
      }
      if (do_sample) write_sample(step);  // after the checkpoint: a stop signal cuts it short
      reporter_.pause(now_seconds() - t0);
    }
    const Stop stop = stop_requested(step);
    if (stop == Stop::OutputFailed) {
      // Rank 0 could not write its run output: every rank stops after this step, with a
      // checkpoint if the checkpoint folder still takes one (it may lie on another disk).
      if (lead) std::fprintf(stderr, "%s\n", reporter_.output_failure().c_str());
      if (!do_ckpt) {
        try {
          reporter_.bank(record_);
          last_saved = save(step);
        } catch (const Error& e) {
          if (!e.agreed()) throw;
          last_saved.clear();
        }
      }
      throw Error(ErrorKind::Output,
                  strcat("output error: stopped after step ", step, " because the run output in ", cfg_.resolved_out_dir(),
                         " could not be written",
                         last_saved.empty() ? std::string("") : "; checkpoint " + last_saved + " (resume with checkpoint.resume=auto)"),
                  true);
    }
    if (stop == Stop::Signal && step < total_steps_) {
      // Every rank finished this step; write its checkpoint (unless just written) and stop cleanly.
      reporter_.bank(record_);
      if (!do_ckpt) last_saved = save(step);
      reporter_.progress().finish();
      nlohmann::json summary = summary_json(now_seconds() - run_start_, step);
      summary["stopped_early"] = true;
      summary["stop_signal"] = signal_name(stop_signal() ? stop_signal() : SIGTERM);
      summary["checkpoint"] = last_saved;
      run_agreed(world_, [&] { reporter_.metrics().write_summary(summary); });
      if (lead)
        reporter_.message(strcat("stop requested (", summary["stop_signal"].get<std::string>(), "): stopped after step ",
                                 step, "; checkpoint ", last_saved, "; run again with checkpoint.resume=auto to continue"));
      return 0;
    }
  }
  reporter_.progress().finish();
  reporter_.bank(record_);
  const nlohmann::json summary = summary_json(now_seconds() - run_start_, total_steps_);
  run_agreed(world_, [&] { reporter_.metrics().write_summary(summary); });
  if (lead) {
    std::string line = strcat("done: ", total_steps_, " steps, ", summary["skipped_steps"].get<int64_t>(),
                              " skipped, final scale ", summary["final_scale"].get<double>());
    if (record_.last_eval_loss >= 0)
      line += model_->classification() ? strcat(", eval accuracy ", record_.last_eval_accuracy * 100.0, "%")
                                       : strcat(", eval ", model_->loss_name(), " ", record_.last_eval_loss);
    if (summary.contains("tokens_per_second"))
      line += strcat(", ", format_count(summary["tokens_per_second"].get<double>()), " tokens/s");
    else if (summary.contains("samples_per_second"))
      line += strcat(", ", format_count(summary["samples_per_second"].get<double>()), " samples/s");
    line += strcat(", params_hash ", summary["params_hash"].get<std::string>());
    reporter_.message(line);
  }
  return 0;
}

}  // namespace amp
