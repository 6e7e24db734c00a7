// Run output of rank 0: out_dir/metrics.jsonl (one JSON object per logged step or evaluation),
// out_dir/summary.json (written atomically at the end) and out_dir/config.yaml.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

namespace amp {

class MetricsWriter {
 public:
  // enabled = false makes every call a no-op (ranks other than 0).
  MetricsWriter(const std::string& out_dir, bool enabled, bool append);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // One line with its wall-clock "time" (Unix seconds) added, written with one write() call. A
  // failed write (disk full) leaves no torn record:
  // it sets failure() and later records are dropped; the trainer stops the run when it sees it.
  void record(const nlohmann::json& j);
  const std::string& failure() const { return failure_; }
  void write_summary(const nlohmann::json& j) const;
  void write_text(const std::string& name, const std::string& text) const;

 private:
  std::string dir_;
  bool enabled_;
  int fd_ = -1;
  std::string failure_;
};

// Keeps the records of metrics.jsonl whose step is at most last_step (a resumed run appends after
// its checkpoint; records written after that checkpoint by the stopped run are dropped). With
// cut_to, the dropped records go to that file (a roll-back keeps the replaced line's records).
void truncate_metrics(const std::string& path, int64_t last_step, const std::string& cut_to = "");


}  // namespace amp
