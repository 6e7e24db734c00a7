// Whole-model FP32 values from rank 0 to every rank, a piece at a time: initial weights and a
// checkpoint's state reach the ranks without any of them (rank 0 aside, which read or made them)
// holding a copy of the whole model on the host.
#pragma once

#include <cstddef>
#include <functional>

#include "comm/communicator.h"
#include "model/weight_pieces.h"
#include "train/step.h"

namespace amp {

// Rank 0's values [begin, begin + count): where they are (valid until the next call).
using PieceSource = std::function<const float*(size_t begin, size_t count)>;

// Collective: rank 0's n values, taken from `source` (called on rank 0 only) in consecutive pieces
// of at most `piece` values, broadcast; every rank gets fn(begin, values, count) for the same
// pieces in the same order.
void broadcast_pieces(Communicator& world, const PieceSource& source, size_t n, const TrainStep::PieceFn& fn,
                      size_t piece = TrainStep::kStreamElements);
// The same from rank 0's WeightPieces (null elsewhere), agreed: an error of src on rank 0 (a value
// that is not finite, a read that failed, a check at its finish()) is held while the remaining
// pieces go out (zeros), then thrown on every rank (run_agreed), never leaving a rank waiting.
void broadcast_pieces(Communicator& world, WeightPieces* src, size_t n, const TrainStep::PieceFn& fn,
                      size_t piece = TrainStep::kStreamElements);

}  // namespace amp
