// FP32 weights as a forward pass reads them: in backend memory, cast to the compute precision
// (round to nearest even, as the optimizer casts the masters into its working copy). For the
// commands that run a model without training it (sample, eval).
#pragma once

#include <cstddef>

#include "backend/backend.h"
#include "core/dtype.h"

namespace amp {

class WorkingWeights {
 public:
  WorkingWeights(Backend& be, const float* host, size_t n, DType compute);
  const void* params() const { return compute_ == DType::F32 ? master_.data() : working_.data(); }

 private:
  DType compute_;
  Buffer master_, working_;
};

}  // namespace amp
