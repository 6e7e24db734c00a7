// FP32 weights as a forward pass reads them: in backend memory, cast to the compute precision
// (round to nearest even, as the optimizer casts the masters into its working copy); with FP8
// compute, the scales the linear layers cast with. For the commands that run a model without
// training it (sample, eval).
#pragma once

#include <cstddef>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "model/model.h"
#include "model/weight_pieces.h"

namespace amp {

class WorkingWeights {
 public:
  // Room for n weights, loaded a piece at a time (load): FP32 compute keeps them as they are,
  // 16-bit compute only their cast (no FP32 copy in backend memory).
  WorkingWeights(Backend& be, size_t n, DType compute);
  // The same, loaded from a reader's pieces (then its finish(): what it checks at the end).
  WorkingWeights(Backend& be, WeightPieces& src, size_t n, DType compute);
  // Weights [begin, begin + count) from host values (reusable once this returns).
  void load(size_t begin, const float* host, size_t count);
  const void* params() const { return weights_.data(); }

 private:
  DeviceMemory& mem_;
  DType compute_;
  size_t n_;
  Buffer weights_;
};

// precision.compute fp8 outside training: the model's FP8 casts bound to fixed scales (one per
// FP8 tensor: those a checkpoint's run ended with, checkpoint_fp8_scales; what that run's own
// evaluations used), in backend memory for as long as this lives; nothing recorded. native_gemm:
// FP8 GEMMs where the ops have them (precision.fp8.gemm auto), as in training.
class FixedFp8Scales {
 public:
  FixedFp8Scales(Backend& be, Model& model, const std::vector<float>& scales, bool native_gemm);

 private:
  Buffer scales_;  // scales | their inverses
};

}  // namespace amp
