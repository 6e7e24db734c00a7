// Communicator factory of a build with NCCL: the NCCL communicator for a device stream (distributed.comm
// auto or nccl), nullptr (the host world) for the CPU backend. MPI on device buffers is refused.
// NCCL lives in the CUDA backend's module (cuda/cuda_module.h), loaded already when a device stream exists.
#include "comm/comm_factory.h"
#include "core/error.h"
#include "cuda/cuda_module.h"

namespace amp {

std::unique_ptr<Communicator> make_grad_communicator(const std::string& choice, Communicator& world,
                                                     DeviceStream* device) {
  if (!device) {
    if (choice == "nccl")
      throw Error(ErrorKind::Config, "config error: distributed.comm is nccl but run.device resolved to cpu "
                                     "(NCCL needs the CUDA backend); use distributed.comm: auto or mpi");
    return nullptr;
  }
  if (choice == "mpi")
    throw Error(ErrorKind::Config, "config error: distributed.comm is mpi but run.device resolved to cuda: MPI "
                                   "collectives on device buffers are not supported; use distributed.comm: auto or nccl");
  // One rank has nothing to reduce: the trainer never uses a gradient communicator then.
  if (world.size() == 1) return nullptr;
  const auto make = cuda::module().make_nccl_communicator;
  if (!make)
    throw Error(ErrorKind::Device, "device error: this amp_ddp was built with NCCL but its CUDA module without it "
                                   "(a libamp_cuda.so of another build)");
  return make(world, *device);
}

}  // namespace amp
