// Backend factory of a build without CUDA: the CPU backend only; asking for CUDA is a clear error.
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"

namespace amp {

bool cuda_available() { return false; }

std::string build_info() { return "CUDA: off, NCCL: off"; }

std::unique_ptr<Backend> make_backend(const std::string& device, int /*local_rank*/, int threads) {
  if (device == "cuda")
    throw Error(ErrorKind::Device,
                "run.device is cuda but this amp_ddp was built without CUDA (configure with nvcc "
                "available, or -DAMP_CUDA=ON); use run.device: cpu or auto");
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace amp
