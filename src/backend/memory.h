// Backend memory: where a backend computes (host memory on the CPU, device memory on CUDA), and
// the ordered copies in and out of it. Pointers called "backend memory" elsewhere live here.
#pragma once

#include <cstddef>

#include "backend/tensor.h"

namespace amp {

// Pages [first, last) of `page` bytes, counted from 0, that lie wholly inside [at, at + bytes)
// (what release() returns) or that overlap it (what commit() and resident_bytes() cover).
struct PageSpan {
  size_t first = 0, last = 0;
};
inline PageSpan pages_inside(size_t at, size_t bytes, size_t page) {
  const size_t first = (at + page - 1) / page, last = (at + bytes) / page;
  return first < last ? PageSpan{first, last} : PageSpan{};
}
inline PageSpan pages_overlapping(size_t at, size_t bytes, size_t page) {
  return bytes == 0 ? PageSpan{} : PageSpan{at / page, (at + bytes + page - 1) / page};
}

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

  // Returning memory that is not needed for a while (distributed.zero 2's gradient buckets), in
  // pages of `release_granularity()` bytes of an alloc_releasable() allocation:
  // - release(p, bytes): the whole pages inside [p, p + bytes) give their memory back once the work
  //   enqueued so far has finished (a device backend returns them later, without waiting). From
  //   then on nothing may read or write them (the CPU backend protects them: a touch is a
  //   segmentation fault, as an unmapped page is on a GPU).
  // - commit(p, bytes): every released page overlapping [p, p + bytes) is brought back, zero-filled,
  //   before the work enqueued after it; the others are left as they are. Called before backward
  //   writes a tensor's gradient.
  // A granularity of 0: this backend cannot (release() and commit() then do nothing).
  virtual Buffer alloc_releasable(size_t bytes) { return alloc(bytes); }
  virtual size_t release_granularity() const { return 0; }
  virtual void release(void* /*p*/, size_t /*bytes*/) {}
  virtual void commit(void* /*p*/, size_t /*bytes*/) {}
  // Bytes of the pages overlapping [p, p + bytes) that hold memory now (a measurement of what
  // release() returned); 0 where a backend cannot tell.
  virtual size_t resident_bytes(const void* /*p*/, size_t /*bytes*/) const { return 0; }
};

}  // namespace amp
