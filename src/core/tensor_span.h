// One parameter tensor inside the flat parameter/gradient buffers (offsets in elements). Plain
// data shared by the layers that cut flat buffers: models (layouts), the gradient reducer
// (buckets), the mixed-precision kernels (per-tensor flags).
#pragma once

#include <cstddef>

namespace amp {

// Shards of the flat buffers (distributed.zero: 1, comm/shard_layout.h) are cut in blocks of this
// many elements: 64 bytes of 16-bit values, 128 bytes of FP32.
constexpr size_t kShardAlign = 32;

struct TensorSpan {
  size_t offset = 0;
  size_t count = 0;
};

}  // namespace amp
