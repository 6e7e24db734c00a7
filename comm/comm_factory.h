// Chooses the communicator for gradients and overflow flags: NCCL on device buffers when the
// backend is CUDA and NCCL is built (distributed.comm auto or nccl), else nullptr: the MPI world.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "comm/mpi_communicator.h"

namespace amp {

std::unique_ptr<Communicator> make_grad_communicator(const std::string& choice, MpiCommunicator& world,
                                                     Backend& backend);

}  // namespace amp
