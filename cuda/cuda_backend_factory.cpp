// The CUDA backend's side of cuda/cuda_module.h: the table the host code's factories call.
#include <cuda_runtime.h>

#include "core/error.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_module.h"
#include "cudart/cuda_check.h"

#ifndef AMP_CUDA_ARCHS
#define AMP_CUDA_ARCHS "?"
#endif
#ifndef AMP_WITH_NCCL
#define AMP_WITH_NCCL 0
#endif
#if AMP_WITH_NCCL
#include "comm/nccl/nccl_communicator.h"
#endif

namespace amp::cuda {
namespace {

bool device_visible(std::string* why) {
  int count = 0;  // left unwritten by the runtime when there is no driver
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky, but leave no trace for later checks
    if (why) *why = strcat("cudaGetDeviceCount: ", cuda_error_string(e));
    return false;
  }
  if (count <= 0) {
    if (why) *why = "cudaGetDeviceCount: no CUDA device";
    return false;
  }
  return true;
}

std::unique_ptr<Backend> make_backend(int local_rank) {
  int count = 0;
  AMP_CUDA_CHECK(cudaGetDeviceCount(&count));
  AMP_CHECK(count > 0, "no CUDA device");
  const int device = (local_rank < 0 ? 0 : local_rank) % count;
  return std::make_unique<CudaBackend>(device);
}

std::string build_info() {
  return strcat("CUDA: on (arch ", AMP_CUDA_ARCHS, ", runtime ", CUDART_VERSION / 1000, ".", CUDART_VERSION % 1000 / 10,
                "), NCCL: ", AMP_WITH_NCCL ? "on" : "off");
}

#if AMP_WITH_NCCL
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& world, DeviceStream& stream) {
  return std::make_unique<NcclCommunicator>(world, stream);
}
#else
constexpr std::unique_ptr<Communicator> (*make_nccl_communicator)(Communicator&, DeviceStream&) = nullptr;
#endif

const Module kModule{kModuleAbi, device_visible, make_backend, build_info, make_nccl_communicator};

}  // namespace
}  // namespace amp::cuda

extern "C" const amp::cuda::Module* amp_cuda_module_v1() { return &amp::cuda::kModule; }
