#include "train/reporting.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"

namespace amp {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

Reporter::Reporter(const Config& cfg, bool lead)
    : cfg_(cfg), lead_(lead), progress_(std::make_unique<Progress>(cfg.run.progress, lead)) {}

void Reporter::open_metrics(int64_t resumed_step, const std::string& replaced_line) {
  const std::string out = cfg_.resolved_out_dir();
  if (lead_ && resumed_step > 0)
    truncate_metrics(out + "/metrics.jsonl", resumed_step, replaced_line.empty() ? "" : replaced_line + "/metrics.jsonl");
  metrics_ = std::make_unique<MetricsWriter>(out, lead_, resumed_step > 0);
  metrics_->write_text("config.yaml", config_to_yaml(cfg_));
}

const std::string& Reporter::output_failure() const {
  static const std::string none;
  return metrics_ ? metrics_->failure() : none;
}

void Reporter::start_interval() {
  interval_start_ = now_seconds();
  pause_ = 0;
}

void Reporter::bank(RunRecord& record) {
  const double t = now_seconds();
  const double elapsed = t - interval_start_ - pause_;
  interval_start_ = t;
  pause_ = 0;
  record.train_seconds += elapsed;
  record.interval_seconds += elapsed;  // NaN stays NaN
}

void Reporter::log(const IntervalView& v, RunRecord& record) {
  bank(record);
  const double seconds = record.interval_seconds;  // every step of the interval, across a resume
  record.interval_seconds = 0;
  const bool timed = std::isfinite(seconds) && seconds > 0 && record.interval_steps > 0;
  const double step_s = timed ? seconds / double(record.interval_steps) : std::nan("");
  const double sps = timed ? double(record.interval_steps) * double(v.global_batch) / seconds : std::nan("");
  ProgressLine p;
  p.step = v.step;
  p.total = v.total_steps;
  p.loss = v.loss;
  p.scale = v.scaler->scale;
  p.skipped = v.scaler->overflow_steps;
  p.grad_norm = v.grad_norm;
  p.lr = v.lr;
  p.step_ms = step_s * 1e3;
  const bool lm = v.tokens_per_sample > 0;
  p.samples_per_s = lm ? sps * double(v.tokens_per_sample) : sps;
  p.rate_unit = lm ? "tokens" : "samples";
  p.eta_s = double(v.total_steps - v.step) * (record.train_seconds / double(std::max<int64_t>(1, v.step)));
  progress_->update(p);
  nlohmann::json r = {{"step", v.step},
                      {"epoch", v.epoch},
                      {"loss", finite_or_null(v.loss)},
                      {"scale", v.scaler->scale},
                      {"skipped", v.scaler->overflow_steps},
                      {"growth_tracker", v.scaler->growth_tracker},
                      {"grad_norm", finite_or_null(v.grad_norm)},
                      {"lr", p.lr}};
  r["samples"] = v.samples;
  if (lm) r["tokens"] = v.samples * v.tokens_per_sample;
  if (timed) r["step_ms"] = p.step_ms, r["samples_per_second"] = sps;  // absent when not measured
  if (timed && lm) r["tokens_per_second"] = sps * double(v.tokens_per_sample);
  metrics_->record(r);
}

void Reporter::telemetry(int64_t step, float scale, const std::vector<GradStats>& stats,
                         const std::vector<std::string>& names, const nlohmann::json& fp8) {
  nlohmann::json t = nlohmann::json::object();
  for (size_t i = 0; i < stats.size(); ++i)
    t[names[i]] = {{"zero_frac", stats[i].zero_frac},
                   {"subnormal_frac", stats[i].subnormal_frac},
                   {"max_abs_scaled", finite_or_null(stats[i].max_abs)}};
  nlohmann::json r = {{"step", step}, {"scale", scale}, {"telemetry", t}};
  if (!fp8.is_null()) r["fp8"] = fp8;
  metrics_->record(r);
}

void Reporter::evaluation(int64_t step, const EvalResult& r, bool classification, const char* loss_name) {
  if (!lead_) return;
  progress_->message(classification ? strcat("eval step ", step, " | loss ", r.loss, " | accuracy ", r.accuracy * 100.0,
                                             "% | ", r.samples, " samples")
                                    : strcat("eval step ", step, " | ", loss_name, " ", r.loss, " | ", r.samples, " samples"));
  nlohmann::json j = {{"step", step}, {"eval_loss", r.loss}, {"eval_samples", r.samples}};
  if (classification) j["eval_accuracy"] = r.accuracy;
  metrics_->record(j);
}

void Reporter::sample(int64_t step, const std::string& text) {
  if (!lead_) return;
  progress_->message(strcat("sample at step ", step, ":\n", text));
  metrics_->record({{"step", step}, {"sample", text}});
}

}  // namespace amp
