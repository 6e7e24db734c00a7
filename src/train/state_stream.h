// Whole-model FP32 values from rank 0 to every rank, a piece at a time: initial weights and a
// checkpoint's state reach the ranks without any of them (rank 0 aside, which read or made them)
// holding a copy of the whole model on the host.
#pragma once

#include <cstddef>

#include "comm/communicator.h"
#include "train/step.h"

namespace amp {

// Collective: rank 0's n values `src` (ignored elsewhere, may be null there), broadcast in
// consecutive pieces of at most `piece` values; every rank gets fn(begin, values, count) for the
// same pieces in the same order.
void broadcast_pieces(Communicator& world, const float* src, size_t n, const TrainStep::PieceFn& fn,
                      size_t piece = TrainStep::kStreamElements);

}  // namespace amp
