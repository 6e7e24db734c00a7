// Work lists of the multi-tensor passes (find_nonfinite, unscale_check, grad_stats): the parameter
// tensors' element ranges cut into chunks of at most kChunkElems, in tensor order, kept in device
// memory with one partial-result slot per chunk. Built once per (spans, range) on first use and
// cached, so a captured step reads tables that outlive the graph and allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "cudart/device_buffer.h"

namespace amp::cuda {

constexpr uint32_t kChunkElems = 4096;

struct Chunk {
  uint64_t begin;  // first element in the flat buffer
  uint32_t len;    // elements (1..kChunkElems)
  int32_t tensor;  // index into the spans
};

// One chunk's contribution to unscale_check: its sum of squares and whether it saw a
// non-finite value (the chunk's tensor index, else INT32_MAX).
struct ChunkPartial {
  double sum_sq;
  int32_t bad_tensor;
  int32_t pad;
};

// One chunk's gradient statistics (grad_stats).
struct ChunkStats {
  uint32_t zeros, subnormals;
  float max_abs;     // NaN when the chunk holds a NaN
  uint32_t pad;
};

static_assert(sizeof(Chunk) == 16 && sizeof(ChunkPartial) == 16 && sizeof(ChunkStats) == 16, "packed work items");

struct SpanTable {
  std::vector<Chunk> host;  // the same list on the host (grad_stats combines per tensor)
  DeviceBuffer<Chunk> chunks;
  DeviceBuffer<ChunkPartial> partials;
  DeviceBuffer<ChunkStats> stats;
  size_t n_tensors = 0;
  size_t size() const { return host.size(); }
};

class StagingRing;

class SpanTableCache {
 public:
  // The table for elements [begin, end) of the spans. A table not built yet is built here, which
  // allocates: that must not happen while the stream is being captured (it throws then).
  const SpanTable& get(const std::vector<TensorSpan>& spans, size_t begin, size_t end, cudaStream_t stream,
                       StagingRing& ring);

 private:
  std::map<std::vector<uint64_t>, std::unique_ptr<SpanTable>> tables_;
};

// Total extent of the spans (largest offset + count).
size_t spans_extent(const std::vector<TensorSpan>& spans);

}  // namespace amp::cuda
