// The pages of a releasable device allocation (DeviceMemory::release / commit, distributed.zero 2's
// gradient buffer) and when each may go. A device keeps running the work enqueued before a
// release, so a released page is first "pending": its memory is returned (unmapped) only once a
// marker recorded at the release has passed (an event). Committed while still pending, it never
// left: it is only zeroed. Committed once returned, it is mapped anew and zeroed. The zeroing is
// enqueued, so it follows the work before the release and precedes the writes after the commit.
//
// Pure bookkeeping over a Driver that does the work (the CUDA backend's: virtual memory calls,
// events, memset on its stream), so that the rules run, and are tested, on any machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace amp {

class PageLedger {
 public:
  class Driver {
   public:
    virtual ~Driver() = default;
    virtual void map(size_t page) = 0;                  // back the page with new memory
    virtual void unmap(size_t page) = 0;                // return the page's memory
    virtual void zero(size_t first, size_t count) = 0;  // enqueued after the work so far
    virtual uint64_t mark() = 0;                        // a marker after the work enqueued so far
    virtual bool passed(uint64_t marker) = 0;           // that work has finished (does not wait)
    virtual void forget(uint64_t marker) = 0;           // the marker is not asked about again
  };

  // `pages` pages, all mapped (the allocation as made).
  PageLedger(size_t pages, Driver& driver);
  // Pages [first, last): to be returned once the work enqueued so far has passed.
  void release(size_t first, size_t last);
  // Pages [first, last) usable again, the released ones zero-filled.
  void commit(size_t first, size_t last);
  // Returns the pending pages whose release marker has passed (release and commit do it too).
  void reap();
  // Pages of [first, last) holding memory (mapped, or pending: not returned yet).
  size_t held(size_t first, size_t last) const;
  size_t pages() const { return state_.size(); }
  bool mapped(size_t page) const { return state_[page] != State::Returned; }
  // Forgets every marker; the pending pages count as mapped (after the owner has waited for the
  // device, before it unmaps whatever is mapped).
  void settle();

 private:
  enum class State : uint8_t { Mapped, Pending, Returned };
  struct Release {
    uint64_t marker;
    size_t first, last;
  };
  Driver& driver_;
  std::vector<State> state_;
  std::vector<uint64_t> marker_;  // per page: the marker of its latest release
  std::deque<Release> pending_;   // in release order, which is the markers' order on the stream
};

}  // namespace amp
