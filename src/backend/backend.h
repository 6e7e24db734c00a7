// The backend seam, split along its axes: memory (memory.h), the compute ops a model is written in
// (compute_ops.h), the mixed-precision and optimizer kernels (amp_kernels.h) and step capture
// (capture.h). The CPU backend runs them on the host (oneDNN GEMMs, OpenMP loops); the CUDA backend
// runs the same operations as kernels and cuBLASLt calls on one stream. A backend hands out its
// parts; code that needs one axis takes that interface (a model takes ComputeOps and DeviceMemory,
// amp::MixedPrecision takes AmpKernels and DeviceMemory), so an op is added to ComputeOps and its
// two implementations (cpu::CpuOps, cuda::CudaOps) and nowhere else.
#pragma once

#include <memory>
#include <string>

#include "backend/amp_kernels.h"
#include "backend/capture.h"
#include "backend/compute_ops.h"
#include "backend/memory.h"

namespace amp {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual DeviceMemory& memory() = 0;
  virtual ComputeOps& ops() = 0;
  virtual AmpKernels& amp_kernels() = 0;
  virtual OptimizerKernels& optimizer() = 0;
  virtual StepCapture& capture() = 0;
};

// Makes the backend for run.device ("auto", "cpu", "cuda"); threads is the CPU thread count.
// A build without CUDA asked for "cuda" throws a clear error.
std::unique_ptr<Backend> make_backend(const std::string& device, int local_rank, int threads);

// True when this build has the CUDA backend and a device is visible.
bool cuda_available();

// "CUDA: on (arch 90), NCCL: on" etc., for --version and the logs.
std::string build_info();

}  // namespace amp
