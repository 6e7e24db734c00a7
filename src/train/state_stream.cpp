#include "train/state_stream.h"

#include <algorithm>
#include <vector>

#include "comm/agree.h"
#include "core/error.h"

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

void broadcast_pieces(Communicator& world, WeightPieces* src, size_t n, const TrainStep::PieceFn& fn, size_t piece) {
  AMP_CHECK(world.rank() != 0 || src, "broadcast_pieces: rank 0 has no weights to send");
  HeldError failed;  // rank 0's
  std::vector<float> zeros;
  const PieceSource source = [&](size_t begin, size_t count) -> const float* {
    const float* v = nullptr;
    failed.attempt([&] { v = src->next(begin, count); });
    if (!failed) return v;
    zeros.assign(count, 0.0f);
    return zeros.data();
  };
  broadcast_pieces(world, source, n, fn, piece);
  if (src) failed.attempt([&] { src->finish(); });
  run_agreed(world, [&] { failed.rethrow(); });
}

}  // namespace amp
