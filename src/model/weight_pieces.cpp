#include "model/weight_pieces.h"

#include <algorithm>

#include "core/error.h"

namespace amp {

std::vector<float> read_all(WeightPieces& src, size_t n, size_t piece) {
  std::vector<float> all(n);
  for (size_t b = 0; b < n; b += piece) {
    const size_t c = std::min(piece, n - b);
    std::copy_n(src.next(b, c), c, all.data() + b);
  }
  src.finish();
  return all;
}

GeneratedWeights::GeneratedWeights(const ParamLayout& L, std::vector<TensorInit> recipe)
    : layout_(L), recipe_(std::move(recipe)) {
  AMP_CHECK(recipe_.size() == L.tensors.size(), "initial weights: a recipe of ", recipe_.size(), " tensors for a layout of ",
            L.tensors.size());
}

const float* GeneratedWeights::next(size_t begin, size_t count) {
  AMP_CHECK(begin == end_ && begin + count <= layout_.total, "initial weights: piece [", begin, ", ", begin + count,
            ") asked after ", end_, " of ", layout_.total);
  end_ = begin + count;
  piece_.assign(count, 0.0f);
  for (const ParamLayout::Slice& s : layout_.slices(begin, count)) {
    const TensorInit& how = recipe_[s.tensor];
    float* out = piece_.data() + s.at;
    if (how.kind == TensorInit::Kind::Constant) {
      std::fill_n(out, s.count, float(how.a));
      continue;
    }
    if (s.tensor != tensor_) {  // a tensor's first slice: its stream starts
      AMP_CHECK(s.first == 0, "initial weights: tensor ", s.tensor, " entered at element ", s.first);
      rng_.reseed(how.stream);
      tensor_ = s.tensor;
    }
    if (how.kind == TensorInit::Kind::Normal) {
      rng_.fill_normal(out, s.count, how.a);
    } else {
      for (size_t e = 0; e < s.count; ++e) out[e] = float(rng_.uniform(how.a, how.b));
    }
  }
  return piece_.data();
}

}  // namespace amp
