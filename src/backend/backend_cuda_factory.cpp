// Backend factory of a CUDA build: CUDA when asked for (or for auto when a device is visible),
// else the CPU backend. (Until the CUDA backend lands, CUDA is reported as unavailable.)
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"

namespace amp {

bool cuda_available() { return false; }

std::string build_info() { return "CUDA: on, NCCL: on"; }

std::unique_ptr<Backend> make_backend(const std::string& device, int /*local_rank*/, int threads) {
  if (device == "cuda") throw Error(ErrorKind::Device, "run.device is cuda but the CUDA backend is not built yet");
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace amp
