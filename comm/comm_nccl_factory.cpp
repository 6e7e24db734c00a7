// Communicator factory of a build with NCCL (placeholder until the NCCL communicator lands).
#include "comm/comm_factory.h"
#include "core/error.h"

namespace amp {

std::unique_ptr<Communicator> make_grad_communicator(const std::string& choice, MpiCommunicator&, Backend& backend) {
  if (choice == "nccl" || !backend.host_accessible())
    throw Error(ErrorKind::Device, "the NCCL communicator is not built yet");
  return nullptr;
}

}  // namespace amp
