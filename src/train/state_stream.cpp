#include "train/state_stream.h"

#include <algorithm>
#include <vector>

namespace amp {

void broadcast_pieces(Communicator& world, const float* src, size_t n, const TrainStep::PieceFn& fn, size_t piece) {
  const bool root = world.rank() == 0;
  std::vector<float> buf(root || world.size() == 1 ? 0 : std::min(n, piece));
  for (size_t b = 0; b < n; b += piece) {
    const size_t c = std::min(piece, n - b);
    // Rank 0 sends from its values where they are (a broadcast only reads the root's buffer).
    float* p = root ? const_cast<float*>(src + b) : buf.data();
    if (world.size() > 1) world.broadcast(view_of(p, c), 0);
    fn(b, p, c);
  }
}

}  // namespace amp
