// A model's FP32 weights made or read a piece at a time, in the layout's order, so that the rank
// that makes them (its initialization, or a file of weights) never holds the whole model: the
// pieces go out to every rank as they come (train/state_stream.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/rng.h"
#include "model/param_layout.h"

namespace amp {

class WeightPieces {
 public:
  virtual ~WeightPieces() = default;
  // The values [begin, begin + count) of the flat buffer (alignment padding 0): begin is 0 first,
  // then the previous piece's end. Valid until the next call. Throws what is wrong with them (a
  // value that is not finite, a read that failed).
  virtual const float* next(size_t begin, size_t count) = 0;
  // After the last piece: what can be checked only once every value went by.
  virtual void finish() {}
};

// A model's FP32 weights read a tensor at a time, in any order (a file that orders its tensors
// its own way, as llm.c's does).
class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // Tensor `tensor`'s values (its rows x cols, in the layout's order) into out.
  virtual void read(size_t tensor, float* out) = 0;
  // After the last tensor: what can be checked only once every value went by.
  virtual void finish() {}
};

// All n values at once (tests, and callers that hold the model anyway), in pieces of `piece`.
std::vector<float> read_all(WeightPieces& src, size_t n, size_t piece = size_t(1) << 24);

// How a tensor starts: the model's choice per tensor (Model::init_recipe).
struct TensorInit {
  enum class Kind { Constant, Normal, Uniform };
  Kind kind = Kind::Constant;
  double a = 0.0;       // Constant: the value; Normal: the standard deviation; Uniform: the low end
  double b = 0.0;       // Uniform: the high end
  uint64_t stream = 0;  // Normal, Uniform: the seed of the tensor's own Rng, drawn from in order
  static TensorInit constant(double v) { return {Kind::Constant, v, 0.0, 0}; }
  static TensorInit normal(double std, uint64_t stream) { return {Kind::Normal, std, 0.0, stream}; }
  static TensorInit uniform(double lo, double hi, uint64_t stream) { return {Kind::Uniform, lo, hi, stream}; }
};

// The initial weights of a recipe (one TensorInit per tensor of L), made as the pieces are asked
// for: every value is the one the whole buffer would have (Normal: float(std * rng.normal()),
// Uniform: float(rng.uniform(lo, hi)), each tensor's stream drawn in element order).
class GeneratedWeights : public WeightPieces {
 public:
  GeneratedWeights(const ParamLayout& L, std::vector<TensorInit> recipe);
  const float* next(size_t begin, size_t count) override;

 private:
  const ParamLayout& layout_;
  std::vector<TensorInit> recipe_;
  std::vector<float> piece_;
  size_t end_ = 0;        // the next piece's begin
  size_t tensor_ = SIZE_MAX;  // whose stream rng_ is
  Rng rng_;
};

}  // namespace amp
