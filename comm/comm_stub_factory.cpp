// Communicator factory of a build without NCCL: gradients always go through MPI.
#include "comm/comm_factory.h"
#include "core/error.h"

namespace amp {

std::unique_ptr<Communicator> make_grad_communicator(const std::string& choice, Communicator& world,
                                                     DeviceStream* device) {
  if (choice == "nccl")
    throw Error(ErrorKind::Config, "config error: distributed.comm is nccl but this amp_ddp was built without NCCL");
  if (device && world.size() > 1)  // one rank reduces nothing
    throw Error(ErrorKind::Device, "device error: the device backend needs the NCCL communicator, which this build lacks");
  return nullptr;
}

}  // namespace amp
