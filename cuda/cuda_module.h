// The CUDA backend's entry points as one table: all that the host code's factories
// (src/backend/backend_cuda_factory.cpp, comm/comm_nccl_factory.cpp) call. No CUDA header is
// included here, so src/ and comm/ can include this file without seeing CUDA types.
//
// The backend is compiled once and linked twice (CMakeLists.txt): into libamp_cuda.so, which
// amp_ddp opens only when a run needs a GPU (a run on the CPU never loads the CUDA libraries), and
// into the static amp_cuda, which the device tests and GPU benchmarks link. Either way the table
// comes from amp_cuda_module_v1().
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "comm/device_stream.h"

namespace amp::cuda {

// Bumped whenever the table changes: a libamp_cuda.so of another version is refused.
constexpr int kModuleAbi = 1;

struct Module {
  int abi;
  // True when the CUDA runtime sees at least one device; otherwise *why (if given) says why not,
  // e.g. "cudaGetDeviceCount: CUDA driver version is insufficient ... (35)" or "no CUDA device".
  bool (*device_visible)(std::string* why);
  // The backend on device local_rank % device count (one GPU per rank of a node).
  std::unique_ptr<Backend> (*make_backend)(int local_rank);
  // "CUDA: on (arch 90, runtime 13.0), NCCL: on" for --version.
  std::string (*build_info)();
  // The NCCL communicator over the backend's stream (collective over world); nullptr in a build
  // without NCCL.
  std::unique_ptr<Communicator> (*make_nccl_communicator)(Communicator& world, DeviceStream& stream);
};

// The table, linked in or loaded from libamp_cuda.so (src/backend/backend_cuda_factory.cpp); a
// device error saying where it was looked for and why it could not be loaded otherwise.
const Module& module();

}  // namespace amp::cuda

// Defined by the CUDA backend (cuda/cuda_backend_factory.cpp); the name a loader looks up.
extern "C" const amp::cuda::Module* amp_cuda_module_v1();
