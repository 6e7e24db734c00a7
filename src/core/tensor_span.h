// One parameter tensor inside the flat parameter/gradient buffers (offsets in elements). Plain
// data shared by the layers that cut flat buffers: models (layouts), the gradient reducer
// (buckets), the mixed-precision kernels (per-tensor flags).
#pragma once

#include <cstddef>

namespace amp {

struct TensorSpan {
  size_t offset = 0;
  size_t count = 0;
};

}  // namespace amp
