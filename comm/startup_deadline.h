// A deadline for the part of start-up no collective watchdog can watch yet: MPI_Init itself. A rank
// that was stopped, or never started, before it reached MPI_Init leaves the others waiting inside
// it (Open MPI's start-up exchange), forever. While a StartupDeadline lives, a thread ends this
// process with exit code 6 and a message naming the rank (from the launcher's environment) once
// `seconds` pass; done() (or destruction) disarms it.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace amp {

class StartupDeadline {
 public:
  StartupDeadline(double seconds, std::string what);
  ~StartupDeadline();
  StartupDeadline(const StartupDeadline&) = delete;
  StartupDeadline& operator=(const StartupDeadline&) = delete;
  void done();

  // The deadline from AMP_STARTUP_TIMEOUT_S (seconds, > 0), else `fallback`; a malformed value is
  // reported on stderr and the fallback used.
  static double seconds_from_env(double fallback);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace amp
