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

  void record(const nlohmann::json& j);  // one line, flushed
  void write_summary(const nlohmann::json& j) const;
  void write_text(const std::string& name, const std::string& text) const;

 private:
  std::string dir_;
  bool enabled_;
  std::FILE* f_ = nullptr;
};

// Writes a file atomically: temporary file, fsync, rename, directory fsync.
void write_file_atomic(const std::string& path, const std::string& data);

}  // namespace amp
