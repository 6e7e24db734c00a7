#include "train/state_stream.h"

#include <algorithm>
#include <vector>

namespace amp {

void broadcast_pieces(Communicator& world, const float* src, size_t n, const TrainStep::PieceFn& fn) {
  const bool root = world.rank() == 0;
  std::vector<float> piece(root || world.size() == 1 ? 0 : std::min(n, TrainStep::kStreamElements));
  for (size_t b = 0; b < n; b += TrainStep::kStreamElements) {
    const size_t c = std::min(TrainStep::kStreamElements, n - b);
    // Rank 0 sends from its values where they are (a broadcast only reads the root's buffer).
    float* p = root ? const_cast<float*>(src + b) : piece.data();
    if (world.size() > 1) world.broadcast(view_of(p, c), 0);
    fn(b, p, c);
  }
}

}  // namespace amp
