// The training state's bytes on one rank (backend memory): the one formula behind TrainStep's
// allocations, the start-up line, summary.json and the memory check before a model is built.
#pragma once

#include <cstddef>

#include "core/dtype.h"
#include "optim/optimizer.h"

namespace amp {

// What decides the training state's size. Elements, not bytes.
struct StateShape {
  size_t params = 0;        // the flat parameter buffer (the layout's total, padding included)
  size_t flat = 0;          // the flat gradient and working-copy buffers (params, padded to the shards)
  size_t held = 0;          // elements this rank updates: its shard (distributed.zero: 1), else flat
  DType compute = DType::F32;
  int moments = 0;          // optimizer state arrays (optimizer_moments)
  bool sharded = false;     // the reduced gradient shard is a buffer of its own
  bool accumulate = false;  // gradient accumulation's FP32 sum of the micro-batches (params elements)
};

struct StateBytes {
  size_t masters = 0;    // FP32 master weights (in FP32 compute they are the working weights: flat)
  size_t moments = 0;    // optimizer state (momentum / AdamW m and v)
  size_t working = 0;    // the 16-bit working copy (0 in FP32 compute)
  size_t gradients = 0;  // compute-type gradients, the reduced shard, FP32 unscaled gradients, the
                         // FP32 sum of accumulated micro-batches
  bool overflow = false;  // a count beyond size_t (then the fields are meaningless)
  size_t total() const { return masters + moments + working + gradients; }
};

// AdamW keeps 2 arrays (m, v), SGD with momentum 1, plain SGD none.
int optimizer_moments(const OptimizerParams& p);

// The shape before the shards exist (the memory check ahead of allocation): a sharded rank holds
// params / world elements rounded up to align-element blocks (the shard layout pads each bucket the
// same way, so this is exact for one bucket and short by less than world x align elements per
// further bucket).
StateShape estimated_state_shape(size_t params, DType compute, const OptimizerParams& opt, int world, bool sharded,
                                 bool accumulate, size_t align);

StateBytes state_bytes(const StateShape& s);

}  // namespace amp
