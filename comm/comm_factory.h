// Chooses the communicator for gradients and overflow flags: NCCL on device buffers when the
// compute runs on a device stream (the CUDA backend) and NCCL is built (distributed.comm auto or
// nccl), else nullptr: the host world communicator.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/device_stream.h"

namespace amp {

// device: the owner of the compute stream when the backend computes on a device, else nullptr.
std::unique_ptr<Communicator> make_grad_communicator(const std::string& choice, Communicator& world,
                                                     DeviceStream* device);

}  // namespace amp
