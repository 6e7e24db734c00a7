// Host-to-device uploads that do not keep the caller's memory: the bytes are copied into a ring of
// pinned memory and copied to the device asynchronously from there. An event per region keeps a
// region from being overwritten while its copy is still in flight (the host waits only when the
// ring is full, i.e. when it runs more than a ring's worth of uploads ahead of the stream).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <deque>
#include <vector>

#include "cudart/device_buffer.h"
#include "cudart/host_wait.h"

namespace amp::cuda {

class StagingRing {
 public:
  // check: run while the host waits for a region (see host_wait.h); may be empty.
  explicit StagingRing(size_t bytes, const WaitCheck* check = nullptr);
  // Enqueues dst <- host_src on the stream; host_src may be reused as soon as this returns.
  void upload(void* dst, const void* host_src, size_t bytes, cudaStream_t stream);

 private:
  struct Region {
    size_t begin, end;
    size_t event;  // index into events_
  };
  size_t reserve(size_t n);  // offset of n free bytes (waits for old copies where needed)
  size_t take_event();

  const WaitCheck* check_;
  PinnedBuffer<unsigned char> buf_;
  size_t cap_ = 0, head_ = 0;
  std::deque<Region> pending_;  // in issue order (and so in completion order on one stream)
  std::vector<Event> events_;
  std::vector<size_t> free_events_;
};

}  // namespace amp::cuda
