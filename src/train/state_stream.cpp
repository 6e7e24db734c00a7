#include "train/state_stream.h"

#include <algorithm>
#include <vector>

namespace amp {

void broadcast_pieces(Communicator& world, const PieceSource& source, size_t n, const TrainStep::PieceFn& fn,
                      size_t piece) {
  const bool root = world.rank() == 0;
  std::vector<float> buf(root || world.size() == 1 ? 0 : std::min(n, piece));
  for (size_t b = 0; b < n; b += piece) {
    const size_t c = std::min(piece, n - b);
    // Rank 0 sends from its values where the source has them (a broadcast only reads the root's buffer).
    float* p = root ? const_cast<float*>(source(b, c)) : buf.data();
    if (world.size() > 1) world.broadcast(view_of(p, c), 0);
    fn(b, p, c);
  }
}

void broadcast_pieces(Communicator& world, const float* src, size_t n, const TrainStep::PieceFn& fn, size_t piece) {
  broadcast_pieces(world, [src](size_t begin, size_t) { return src + begin; }, n, fn, piece);
}

}  // namespace amp
