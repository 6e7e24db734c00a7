// Backend memory: where a backend computes (host memory on the CPU, device memory on CUDA), and
// the ordered copies in and out of it. Pointers called "backend memory" elsewhere live here.
#pragma once

#include <cstddef>

#include "backend/tensor.h"

namespace amp {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual bool host_accessible() const = 0;  // true: backend memory is ordinary host memory

  // Allocations are zero-filled.
  virtual Buffer alloc(size_t bytes) = 0;
  virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;    // ordered on the stream
  virtual void download(void* host_dst, const void* src, size_t bytes) = 0;  // waits for the stream
  virtual void zero(void* dst, size_t bytes) = 0;
  virtual void synchronize() = 0;
  // Bytes this rank may still allocate (host memory available / ranks of this node, or the
  // device's free memory); 0 when unknown. Checked before a model is built.
  virtual size_t memory_available(int ranks_on_node) const = 0;

  // Returning memory that is not needed for a while (distributed.zero 2's gradient buckets): the
  // whole pages of `release_granularity()` bytes inside [p, p + bytes) of an alloc_releasable()
  // allocation give their memory back; they read as zero until written again, which brings it back.
  // A granularity of 0: this backend cannot (release() then does nothing).
  virtual Buffer alloc_releasable(size_t bytes) { return alloc(bytes); }
  virtual size_t release_granularity() const { return 0; }
  virtual void release(void* /*p*/, size_t /*bytes*/) {}
  // Bytes of the pages overlapping [p, p + bytes) that hold memory now (a measurement of what
  // release() returned); 0 where a backend cannot tell.
  virtual size_t resident_bytes(const void* /*p*/, size_t /*bytes*/) const { return 0; }
};

}  // namespace amp
