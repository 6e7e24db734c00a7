#include "train/run.h"

#include "core/error.h"

namespace amp {

int run(const Config&, MpiCommunicator&) {
  throw Error(ErrorKind::Config, "config error: training is not built yet; use --dry-run");
}

}  // namespace amp
