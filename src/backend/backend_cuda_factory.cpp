// CUDA build: the CUDA side of the backend factory.
#include "train/run.h"

namespace amp {

std::string build_info() { return "CUDA: on"; }

}  // namespace amp
