// Rank 0's progress output: one line per log interval in a fixed order (a live bar redrawn in place
// on a terminal, plain lines in batch logs), with throughput and ETA.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace amp {

struct ProgressLine {
  int64_t step = 0, total = 0;
  double loss = 0, scale = 0, grad_norm = 0, lr = 0, step_ms = 0, samples_per_s = 0, eta_s = 0;
  const char* rate_unit = "samples";  // what samples_per_s counts ("tokens" for language models)
  int64_t skipped = 0;
};

std::string format_progress(const ProgressLine& p);  // "step 120/5000 | loss 0.4121 | ..."
std::string format_duration(double seconds);          // "3m12s"
std::string format_count(double v);                   // "12.3k"

class Progress {
 public:
  // mode: "auto" (bar when stdout is a terminal), "bar", "lines" or "off" (messages only).
  // enabled = false (ranks other than 0) prints nothing at all.
  Progress(const std::string& mode, bool enabled);
  void update(const ProgressLine& p);
  void message(const std::string& line);  // a permanent line (eval results, skips), above the bar
  void finish();

 private:
  bool enabled_, show_, bar_;
  bool bar_drawn_ = false;
};

}  // namespace amp
