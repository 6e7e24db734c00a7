#include "comm/startup_deadline.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace amp {

namespace {

// The rank as the launcher named it, before MPI can say.
std::string launcher_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* r = std::getenv(v)) return r;
  return "?";
}

}  // namespace

StartupDeadline::StartupDeadline(double seconds, std::string what) {
  thread_ = std::thread([this, seconds, what = std::move(what)] {
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return done_; })) return;
    std::fprintf(stderr,
                 "[rank %s] start-up error: %s did not complete within %g s (AMP_STARTUP_TIMEOUT_S): a rank of the "
                 "job was stopped or never started; ending this rank\n",
                 launcher_rank().c_str(), what.c_str(), seconds);
    std::fflush(stderr);
    ::_exit(6);
  });
}

StartupDeadline::~StartupDeadline() { done(); }

void StartupDeadline::done() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

double StartupDeadline::seconds_from_env(double fallback) {
  const char* v = std::getenv("AMP_STARTUP_TIMEOUT_S");
  if (!v) return fallback;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (end == v || *end != '\0' || !std::isfinite(s) || s <= 0) {
    std::fprintf(stderr, "warning: AMP_STARTUP_TIMEOUT_S=\"%s\" is not a positive number of seconds; using %g\n", v,
                 fallback);
    return fallback;
  }
  return s;
}

}  // namespace amp
