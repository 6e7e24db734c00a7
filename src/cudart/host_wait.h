// Host waits on the device that stay interruptible. cudaStreamSynchronize and cudaEventSynchronize
// block inside the driver until the work is done, and an NCCL collective whose peer failed can
// spin on the device forever: a host blocked there never sees the error. With a check, these waits
// poll instead and run the check every few milliseconds; the check may throw (the NCCL
// communicator's raises its asynchronous error after aborting the communicator, which stops the
// collective's kernels). Without a check they are the plain blocking calls.
#pragma once

#include <cuda_runtime.h>

#include <functional>

namespace amp::cuda {

using WaitCheck = std::function<void()>;

void wait_stream(cudaStream_t stream, const WaitCheck& check);
void wait_event(cudaEvent_t event, const WaitCheck& check);

}  // namespace amp::cuda
