#include "backend/page_ledger.h"

#include "core/error.h"

namespace amp {

PageLedger::PageLedger(size_t pages, Driver& driver)
    : driver_(driver), state_(pages, State::Mapped), marker_(pages, 0) {}

void PageLedger::release(size_t first, size_t last) {
  AMP_CHECK(first <= last && last <= state_.size(), "PageLedger::release: pages ", first, "..", last, " of ",
            state_.size());
  if (first == last) return;
  const uint64_t m = driver_.mark();
  for (size_t p = first; p < last; ++p) {
    if (state_[p] == State::Returned) continue;
    state_[p] = State::Pending;
    marker_[p] = m;  // a page released again waits for the later marker
  }
  pending_.push_back(Release{m, first, last});
  reap();
}

void PageLedger::reap() {
  // Markers pass in the order they were recorded: stop at the first that has not.
  while (!pending_.empty() && driver_.passed(pending_.front().marker)) {
    const Release r = pending_.front();
    pending_.pop_front();
    for (size_t p = r.first; p < r.last; ++p)
      if (state_[p] == State::Pending && marker_[p] == r.marker) {
        driver_.unmap(p);
        state_[p] = State::Returned;
      }
    driver_.forget(r.marker);
  }
}

void PageLedger::commit(size_t first, size_t last) {
  AMP_CHECK(first <= last && last <= state_.size(), "PageLedger::commit: pages ", first, "..", last, " of ",
            state_.size());
  reap();
  size_t run = last;  // the start of a run of pages to zero
  for (size_t p = first; p <= last; ++p) {
    const bool released = p < last && state_[p] != State::Mapped;
    if (released) {
      if (state_[p] == State::Returned) driver_.map(p);
      state_[p] = State::Mapped;  // a pending page never left: its release entry skips it now
      if (run == last) run = p;
    } else if (run != last) {
      driver_.zero(run, p - run);
      run = last;
    }
  }
}

size_t PageLedger::held(size_t first, size_t last) const {
  size_t n = 0;
  for (size_t p = first; p < last && p < state_.size(); ++p) n += state_[p] != State::Returned;
  return n;
}

void PageLedger::settle() {
  for (const Release& r : pending_) driver_.forget(r.marker);
  pending_.clear();
  for (State& s : state_)
    if (s == State::Pending) s = State::Mapped;
}

}  // namespace amp
