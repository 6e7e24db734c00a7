#include "core/error.h"

#include <cstdio>

namespace amp {

void fail_check(const char* file, int line, const char* expr, const std::string& msg) {
  throw Error(ErrorKind::Internal,
              strcat(file, ":", line, ": check failed: ", expr, msg.empty() ? "" : ": ", msg));
}

const char* error_prefix(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Internal: return "internal error: ";
    case ErrorKind::Config: return "config error: ";
    case ErrorKind::Data: return "data error: ";
    case ErrorKind::Checkpoint: return "checkpoint error: ";
    case ErrorKind::Divergence: return "divergence error: ";
    case ErrorKind::Comm: return "communication error: ";
    case ErrorKind::Device: return "device error: ";
    case ErrorKind::Output: return "output error: ";
  }
  return "error: ";
}

std::string with_error_prefix(ErrorKind kind, const std::string& msg) {
  const std::string prefix = error_prefix(kind);
  if (msg.rfind(prefix, 0) == 0) return msg;
  if (kind == ErrorKind::Config && msg.rfind("usage error: ", 0) == 0) return msg;  // the command line's
  // An error passed on from another (agreed on, rethrown) keeps the prefix it has.
  for (int k = int(ErrorKind::Internal); k <= int(ErrorKind::Output); ++k)
    if (msg.rfind(error_prefix(ErrorKind(k)), 0) == 0) return msg;
  return prefix + msg;
}

void warn(const std::string& msg) {
  std::fprintf(stderr, "warning: %s\n", msg.c_str());
  std::fflush(stderr);
}

}  // namespace amp
