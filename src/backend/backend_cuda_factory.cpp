// Backend factory of a CUDA build: CUDA when asked for (or for auto when a device is visible),
// else the CPU backend. CUDA types stay behind cuda/cuda_backend_factory.h.
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "cuda/cuda_backend_factory.h"

namespace amp {

bool cuda_available() { return cuda::cuda_device_visible(nullptr); }

std::string build_info() { return cuda::cuda_build_info(); }

std::unique_ptr<Backend> make_backend(const std::string& device, int local_rank, int threads) {
  if (device == "cuda") {
    std::string why;
    if (!cuda::cuda_device_visible(&why))
      throw Error(ErrorKind::Device, strcat("run.device is cuda but no CUDA device is visible (", why,
                                            "); use run.device: cpu or auto"));
    return cuda::make_cuda_backend(local_rank);
  }
  if (device == "auto" && cuda::cuda_device_visible(nullptr)) return cuda::make_cuda_backend(local_rank);
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace amp
