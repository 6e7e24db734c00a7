// One error type for the whole program. Each kind maps to a process exit code; main() prints the
// message with the rank and ends every rank of the job (no rank is left waiting in a collective).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace amp {

enum class ErrorKind {
  Internal = 1,    // a bug or an unexpected system failure
  Config = 2,      // bad config file, bad --set, bad command line
  Data = 3,        // missing, truncated or malformed data files
  Checkpoint = 4,  // unreadable, corrupted or mismatched checkpoint
  Divergence = 5,  // training diverged (loss scale at its minimum and still overflowing)
  Comm = 6,        // communication failure or ranks that disagree
  Device = 7,      // CUDA/NCCL/cuBLAS failure or device unavailable
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& msg, bool agreed = false)
      : std::runtime_error(msg), kind_(kind), agreed_(agreed) {}
  ErrorKind kind() const { return kind_; }
  int exit_code() const { return static_cast<int>(kind_); }
  // True when every rank raised this error at the same point and it has been reported once:
  // the ranks can exit cleanly with exit_code() instead of aborting the job.
  bool agreed() const { return agreed_; }

 private:
  ErrorKind kind_;
  bool agreed_;
};

// Stream-style message builder: throw Error(ErrorKind::Data, strcat("x", 1, "y")).
template <typename... Args>
std::string strcat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

[[noreturn]] void fail_check(const char* file, int line, const char* expr, const std::string& msg);

}  // namespace amp

// Internal invariant check: a failure is a bug, reported with file:line and the expression.
#define AMP_CHECK(cond, ...)                                                          \
  do {                                                                                \
    if (!(cond)) ::amp::fail_check(__FILE__, __LINE__, #cond, ::amp::strcat(__VA_ARGS__)); \
  } while (0)
