#include "cuda/span_table.h"

#include <algorithm>
#include <climits>

#include "core/error.h"
#include "cuda/staging_ring.h"

namespace amp::cuda {

size_t spans_extent(const std::vector<TensorSpan>& spans) {
  size_t total = 0;
  for (const auto& s : spans) total = std::max(total, s.offset + s.count);
  return total;
}

const SpanTable& SpanTableCache::get(const std::vector<TensorSpan>& spans, size_t begin, size_t end,
                                     cudaStream_t stream, StagingRing& ring) {
  std::vector<uint64_t> key;
  key.reserve(2 + 2 * spans.size());
  key.push_back(begin);
  key.push_back(end);
  for (const auto& s : spans) {
    key.push_back(s.offset);
    key.push_back(s.count);
  }
  auto it = tables_.find(key);
  if (it != tables_.end()) return *it->second;

  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  AMP_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  if (status != cudaStreamCaptureStatusNone)
    throw Error(ErrorKind::Internal,
                "cuda backend: a multi-tensor pass met a new tensor layout while a CUDA graph was being captured; "
                "run the step once eagerly before capturing it");

  auto t = std::make_unique<SpanTable>();
  t->n_tensors = spans.size();
  AMP_CHECK(spans.size() < size_t(INT32_MAX), "too many tensors");
  for (size_t i = 0; i < spans.size(); ++i) {
    const size_t b = std::max(begin, spans[i].offset), e = std::min(end, spans[i].offset + spans[i].count);
    for (size_t c = b; c < e; c += kChunkElems)
      t->host.push_back(Chunk{c, uint32_t(std::min<size_t>(kChunkElems, e - c)), int32_t(i)});
  }
  AMP_CHECK(t->host.size() < size_t(INT32_MAX), "multi-tensor pass over too many chunks: ", t->host.size());
  if (!t->host.empty()) {
    t->chunks = DeviceBuffer<Chunk>(t->host.size());
    t->partials = DeviceBuffer<ChunkPartial>(t->host.size());
    t->stats = DeviceBuffer<ChunkStats>(t->host.size());
    ring.upload(t->chunks.get(), t->host.data(), t->host.size() * sizeof(Chunk), stream);
  }
  return *tables_.emplace(std::move(key), std::move(t)).first->second;
}

}  // namespace amp::cuda
