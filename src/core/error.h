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
  Divergence = 5,  // training diverged (non-finite loss or weights, exploding loss, overflow at the minimum scale)
  Comm = 6,        // communication failure or ranks that disagree
  Device = 7,      // CUDA/NCCL/cuBLAS failure or device unavailable
  Output = 8,      // run output cannot be written (out_dir, checkpoint.dir: permissions, disk full)
};

// Every error message starts with its kind's prefix ("config error: ", "checkpoint error: ", ...),
// so a user can grep a log for it: a message given without one gets it here.
const char* error_prefix(ErrorKind kind);
std::string with_error_prefix(ErrorKind kind, const std::string& msg);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& msg, bool agreed = false, bool reported = false)
      : std::runtime_error(with_error_prefix(kind, msg)), kind_(kind), agreed_(agreed), reported_(reported) {}
  ErrorKind kind() const { return kind_; }
  int exit_code() const { return static_cast<int>(kind_); }
  // True when every rank raised this error at the same point: the ranks can exit cleanly with
  // exit_code() instead of aborting the job. main() prints an agreed error once, on rank 0,
  // unless reported() says that the rank that found it printed it already.
  bool agreed() const { return agreed_; }
  bool reported() const { return reported_; }

 private:
  ErrorKind kind_;
  bool agreed_;
  bool reported_;
};

// Stream-style message builder: throw Error(ErrorKind::Data, strcat("x", 1, "y")).
template <typename... Args>
std::string strcat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

[[noreturn]] void fail_check(const char* file, int line, const char* expr, const std::string& msg);

// The one warning path: "warning: MSG" on stderr (something went wrong that does not stop the run).
void warn(const std::string& msg);

}  // namespace amp

// Internal invariant check: a failure is a bug, reported with file:line and the expression.
#define AMP_CHECK(cond, ...)                                                          \
  do {                                                                                \
    if (!(cond)) ::amp::fail_check(__FILE__, __LINE__, #cond, ::amp::strcat(__VA_ARGS__)); \
  } while (0)
