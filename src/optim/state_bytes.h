// The training state's bytes on one rank (backend memory): the one formula behind TrainStep's
// allocations, the start-up line, summary.json and the memory check before a model is built.
#pragma once

#include <cstddef>
#include <vector>

#include "core/dtype.h"
#include "core/tensor_span.h"
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
  size_t unscale_chunk = 0;  // FP32 unscaled gradients held at once (unscale_chunk()), at most held
  bool released = false;    // distributed.zero 2: the gradient buffer holds `window` elements at most
  size_t window = 0;        //   (the buckets in flight; stage2_window), not flat
};

struct StateBytes {
  size_t masters = 0;    // FP32 master weights (in FP32 compute they are the working weights: flat)
  size_t moments = 0;    // optimizer state (momentum / AdamW m and v)
  size_t working = 0;    // the 16-bit working copy (0 in FP32 compute)
  size_t gradients = 0;  // compute-type gradients, the reduced shard, the chunk of FP32 unscaled
                         // gradients, the FP32 sum of accumulated micro-batches
  bool overflow = false;  // a count beyond size_t (then the fields are meaningless)
  size_t total() const { return masters + moments + working + gradients; }
};

// AdamW keeps 2 arrays (m, v), SGD with momentum 1, plain SGD none.
int optimizer_moments(const OptimizerParams& p);

// The shape before the shards exist (the memory check ahead of allocation): a sharded rank holds
// params / world elements rounded up to align-element blocks (the shard layout pads each bucket the
// same way, so this is exact for one bucket and short by less than world x align elements per
// further bucket).
// zero: distributed.zero (sharded from 1, gradients released from 2, on more than one rank);
// spans and bucket_bytes: the tensors and the buckets, for stage 2's window.
StateShape estimated_state_shape(size_t params, DType compute, const OptimizerParams& opt, int world, int zero,
                                 bool accumulate, size_t align, const std::vector<TensorSpan>& spans,
                                 size_t bucket_bytes);

// The CPU backend returns stage 2's gradient memory in pages of this size (transparent huge pages:
// on the VMs measured, writing 64 MiB of returned 4 KiB pages took 196 ms, of 2 MiB pages 5.7 ms).
constexpr size_t kReleasePageBytes = size_t(2) << 20;

// The optimizer unscales the gradients it updates chunk by chunk into an FP32 buffer of this many
// elements (a bucket's bytes in FP32, at least 1024), not into an FP32 copy of them all.
size_t unscale_chunk(size_t bucket_bytes);

// The elements of that chunk unscaled and then updated per pass: the backend's pass_elements (0:
// the whole chunk), at most the chunk, at least 1.
size_t unscale_pass(size_t chunk, size_t pass_elements);

// Stage 2's bound on the 16-bit gradient elements resident at once: backward writes a tensor's
// gradient, completes it, and its bucket is returned once reduced; resident are the tensor being
// written with the completed tensors of its bucket, a tensor completed late (the tied embedding,
// written by the head first and by the embedding last), and the buckets in flight (at most
// GradReducer::kStage2InFlight = 2): the two largest tensors and three buckets, and four pages
// (kReleasePageBytes) for the pages kept at bucket edges, at most the whole buffer.
size_t stage2_window(const std::vector<TensorSpan>& spans, size_t flat, size_t bucket_elems, size_t page_elems);

StateBytes state_bytes(const StateShape& s);

}  // namespace amp
