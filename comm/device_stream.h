// What a device-buffer communicator (NCCL) needs from the owner of the compute stream its
// collectives are ordered with, as an interface that comm/ defines and the CUDA backend implements,
// so that comm/ depends on no backend: the stream, the captured step graph that may hold its
// collectives (NCCL cannot be destroyed or aborted while such a graph lives), the graph's launch
// count (events recorded in a graph are recorded again by each launch), and a hook that the
// owner's host waits on the stream run, so they notice a failed collective instead of blocking.
#pragma once

#include <cstdint>
#include <functional>

namespace amp {

class DeviceStream {
 public:
  virtual ~DeviceStream() = default;
  virtual void* stream_handle() = 0;  // cudaStream_t
  // Drops the captured graph (if any); the graph's owner captures a new one when it needs it.
  virtual void release_capture() noexcept = 0;
  // The live graph's id (0: none; each capture gets a new one) and how often it was launched.
  virtual uint64_t graph_id() const = 0;
  virtual uint64_t graph_launches() const = 0;
  // Runs while the owner's host waits for the stream; it may throw to end the wait. Empty: none.
  virtual void set_wait_check(std::function<void()> check) = 0;
};

}  // namespace amp
