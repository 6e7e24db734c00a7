// Entry points of the CUDA backend for the host-side factories. No CUDA header is included here,
// so src/ can include this file in a CUDA build without seeing CUDA types.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"

namespace amp::cuda {

// True when the CUDA runtime sees at least one device; otherwise *why (if given) says why not,
// e.g. "cudaGetDeviceCount: CUDA driver version is insufficient ... (35)" or "no CUDA device".
bool cuda_device_visible(std::string* why);

// The backend on device local_rank % device count (one GPU per rank of a node).
std::unique_ptr<Backend> make_cuda_backend(int local_rank);

// "CUDA: on (arch 90, runtime 13.0), NCCL: on" for --version and the logs.
std::string cuda_build_info();

}  // namespace amp::cuda
