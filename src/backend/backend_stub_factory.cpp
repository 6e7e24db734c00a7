// CPU-only build: the CUDA side of the backend factory. Asking for CUDA is a clear error.
#include "train/run.h"

namespace amp {

std::string build_info() { return "CUDA: off, NCCL: off"; }

}  // namespace amp
