// Communicator factory of a build with NCCL: the NCCL communicator for a device stream (distributed.comm
// auto or nccl), nullptr (the host world) for the CPU backend. MPI on device buffers is refused.
#include "comm/comm_factory.h"
#include "comm/nccl/nccl_communicator.h"
#include "core/error.h"

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
  return std::make_unique<NcclCommunicator>(world, *device);
}

}  // namespace amp
