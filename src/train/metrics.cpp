#include "train/metrics.h"

#include <chrono>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/files.h"

namespace amp {

void truncate_metrics(const std::string& path, int64_t last_step, const std::string& cut_to) {
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec))) return;
  // Read only a regular file: a FIFO would block, a device (/dev/zero) never end.
  if (const std::string problem = regular_file_problem(path); !problem.empty())
    throw Error(ErrorKind::Output, strcat("output error: ", path, ": ", problem,
                                          "; the run appends its records to this file: move that away"));
  std::ifstream in(path);
  if (!in) return;
  std::string kept, cut, line;
  while (std::getline(in, line)) {
    try {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("step") && j["step"].get<int64_t>() > last_step) {
        cut += line + "\n";
        continue;
      }
    } catch (const std::exception&) {
      continue;  // a line cut short by a crash
    }
    kept += line + "\n";
  }
  if (!cut_to.empty() && !cut.empty()) write_file_atomic(cut_to, cut);  // before the records leave metrics.jsonl
  write_file_atomic(path, kept);
}

MetricsWriter::MetricsWriter(const std::string& out_dir, bool enabled, bool append)
    : dir_(out_dir), enabled_(enabled) {
  if (!enabled_) return;
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw Error(ErrorKind::Output, strcat("output error: run.out_dir: cannot create ", dir_, ": ", ec.message()));
  const std::string path = dir_ + "/metrics.jsonl";
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (append ? 0 : O_TRUNC), 0644);
  if (fd_ < 0) throw Error(ErrorKind::Output, strcat("output error: run.out_dir: cannot write ", path, ": ", std::strerror(errno)));
}

MetricsWriter::~MetricsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsWriter::record(const nlohmann::json& j) {
  if (fd_ < 0 || !failure_.empty()) return;
  nlohmann::json stamped = j;  // every record carries its wall-clock time (Unix seconds)
  stamped["time"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string line = stamped.dump() + "\n";
  // One write() per record on an O_APPEND descriptor; if it fails or falls short (disk full), the
  // partial record is cut off again, so the file never holds a torn line.
  const off_t before = ::lseek(fd_, 0, SEEK_END);
  size_t done = 0;
  int err = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : ENOSPC;
      break;
    }
    done += size_t(n);
  }
  if (done == line.size()) return;
  if (before >= 0 && ::ftruncate(fd_, before) != 0) {
    // The torn tail stays; truncate_metrics drops unparsable lines when a run resumes.
  }
  failure_ = strcat("output error: ", dir_, "/metrics.jsonl: write failed: ", std::strerror(err));
}

void MetricsWriter::write_summary(const nlohmann::json& j) const {
  if (enabled_) write_file_atomic(dir_ + "/summary.json", j.dump(2) + "\n");
}

void MetricsWriter::write_text(const std::string& name, const std::string& text) const {
  if (enabled_) write_file_atomic(dir_ + "/" + name, text);
}

}  // namespace amp
