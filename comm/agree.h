// Collective error agreement for set-up phases: every rank runs the same step; if it fails on any
// rank, the lowest failing rank prints its message and every rank throws an agreed Error with that
// rank's exit code, so the job ends cleanly with one message instead of an abort per rank.
#pragma once

#include <functional>

#include "comm/communicator.h"

namespace amp {

void run_agreed(Communicator& world, const std::function<void()>& step);

}  // namespace amp
