#include "train/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>

namespace amp {

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const long t = long(s + 0.5);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

std::string format_count(double v) {
  char buf[32];
  if (v >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  else if (v >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

std::string format_progress(const ProgressLine& p) {
  char rate[96] = "";  // absent when the interval's time was not measured (NaN)
  if (std::isfinite(p.step_ms))
    std::snprintf(rate, sizeof rate, "%.1f ms | %s %s/s | ", p.step_ms, format_count(p.samples_per_s).c_str(), p.rate_unit);
  char buf[320];
  std::snprintf(buf, sizeof buf, "step %lld/%lld | loss %.4f | scale %g | skipped %lld | grad_norm %.3g | lr %.2e | %sETA %s",
                (long long)p.step, (long long)p.total, p.loss, p.scale, (long long)p.skipped, p.grad_norm, p.lr, rate,
                format_duration(p.eta_s).c_str());
  return buf;
}

namespace {
// A live bar only for a person at a terminal: launchers (mpirun, srun) hand ranks a pseudo-terminal
// even when their own output goes to a batch log, so under a launcher auto means plain lines.
bool interactive() {
  if (!::isatty(STDOUT_FILENO)) return false;
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "SLURM_JOB_ID"})
    if (std::getenv(v)) return false;
  const char* term = std::getenv("TERM");
  return !(term && std::string(term) == "dumb");
}
}  // namespace

Progress::Progress(const std::string& mode, bool enabled)
    : enabled_(enabled), show_(mode != "off"), bar_(mode == "bar" || (mode == "auto" && interactive())) {}

void Progress::update(const ProgressLine& p) {
  if (!enabled_ || !show_) return;
  const std::string line = format_progress(p);
  if (bar_) {
    const int width = 24;
    const int filled = p.total > 0 ? int(double(width) * double(p.step) / double(p.total)) : 0;
    std::string bar(size_t(filled), '#');
    bar.resize(size_t(width), '.');
    std::printf("\r\033[K[%s] %s", bar.c_str(), line.c_str());
    bar_drawn_ = true;
  } else {
    std::printf("%s\n", line.c_str());
  }
  std::fflush(stdout);
}

void Progress::message(const std::string& line) {
  if (!enabled_) return;
  if (bar_ && bar_drawn_) std::printf("\r\033[K");
  std::printf("%s\n", line.c_str());
  bar_drawn_ = false;
  std::fflush(stdout);
}

void Progress::finish() {
  if (enabled_ && bar_ && bar_drawn_) std::printf("\n");
  bar_drawn_ = false;
  std::fflush(stdout);
}

}  // namespace amp
