// Collective error agreement for set-up phases: every rank runs the same step; if it fails on any
// rank, the lowest failing rank prints its message and every rank throws an agreed Error with that
// rank's exit code, so the job ends cleanly with one message instead of an abort per rank.
#pragma once

#include <exception>
#include <functional>

#include "comm/communicator.h"

namespace amp {

void run_agreed(Communicator& world, const std::function<void()>& step);

// A rank's first error, held while the rank still takes part in collectives (a throw there would
// leave the other ranks waiting in them), then rethrown, typically inside run_agreed.
class HeldError {
 public:
  // Runs f unless an error is held already; an exception from it is held, not thrown.
  template <typename F>
  void attempt(F&& f) {
    if (first_) return;
    try {
      f();
    } catch (...) {
      first_ = std::current_exception();
    }
  }
  explicit operator bool() const { return bool(first_); }
  void rethrow() const {
    if (first_) std::rethrow_exception(first_);
  }

 private:
  std::exception_ptr first_;
};

}  // namespace amp
