#include "cuda/staging_ring.h"

#include <algorithm>
#include <cstring>

namespace amp::cuda {

namespace {
constexpr size_t kAlign = 256;
}

StagingRing::StagingRing(size_t bytes, const WaitCheck* check) : check_(check), buf_(bytes), cap_(bytes) {}

size_t StagingRing::take_event() {
  if (free_events_.empty()) {
    events_.emplace_back(false);
    return events_.size() - 1;
  }
  const size_t e = free_events_.back();
  free_events_.pop_back();
  return e;
}

size_t StagingRing::reserve(size_t n) {
  size_t off = (head_ + kAlign - 1) / kAlign * kAlign;
  if (off + n > cap_) off = 0;  // wrap: the tail of the ring is skipped
  const auto overlaps = [&](const Region& r) { return r.begin < off + n && off < r.end; };
  // Regions complete in issue order: wait for the oldest until none overlaps [off, off + n).
  while (std::any_of(pending_.begin(), pending_.end(), overlaps)) {
    static const WaitCheck kNoCheck;
    const Region r = pending_.front();
    wait_event(events_[r.event].get(), check_ ? *check_ : kNoCheck);  // then its bytes may be overwritten
    pending_.pop_front();
    free_events_.push_back(r.event);
  }
  // Retire completed regions so the queue stays short (non-blocking).
  while (!pending_.empty()) {
    const cudaError_t q = cudaEventQuery(events_[pending_.front().event].get());
    if (q == cudaErrorNotReady) {
      cudaGetLastError();  // no error: leave nothing for a later launch check
      break;
    }
    AMP_CUDA_CHECK(q);
    free_events_.push_back(pending_.front().event);
    pending_.pop_front();
  }
  return off;
}

void StagingRing::upload(void* dst, const void* host_src, size_t bytes, cudaStream_t stream) {
  const size_t piece = std::max<size_t>(kAlign, cap_ / 4);
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(host_src);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(piece, bytes - done);
    const size_t off = reserve(n);
    std::memcpy(buf_.get() + off, s + done, n);
    AMP_CUDA_CHECK(cudaMemcpyAsync(d + done, buf_.get() + off, n, cudaMemcpyHostToDevice, stream));
    const size_t e = take_event();
    AMP_CUDA_CHECK(cudaEventRecord(events_[e].get(), stream));
    pending_.push_back(Region{off, off + n, e});
    head_ = off + n;
    done += n;
  }
}

}  // namespace amp::cuda
