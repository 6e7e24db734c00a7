#include "core/error.h"

namespace amp {

void fail_check(const char* file, int line, const char* expr, const std::string& msg) {
  throw Error(ErrorKind::Internal,
              strcat(file, ":", line, ": check failed: ", expr, msg.empty() ? "" : ": ", msg));
}

}  // namespace amp
