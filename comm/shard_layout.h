// Sharded optimizer state (distributed.zero: 1, ZeRO stage 1): which elements of the flat
// gradient / weight buffers each rank reduces, unscales and updates.
//
// The flat buffer is padded to a multiple of world x kShardAlign elements and cut into the
// reducer's buckets from its end (as make_buckets does), every bucket a multiple of world x
// kShardAlign elements. Each bucket is reduce-scattered: rank r receives block r of it (the
// bucket's elements / world). A rank's shard is its blocks of every bucket, concatenated in flat
// order, so that shards are equal in size, every block starts on a kShardAlign boundary in both the
// flat buffer and the shard (vector loads and 16-byte GPU loads stay aligned), and each tensor's
// part of a shard is one contiguous range (a tensor may span several shards). After the update,
// each bucket's blocks are all-gathered in place into the 16-bit working copy.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "comm/grad_reducer.h"
#include "core/tensor_span.h"

namespace amp {

// One bucket's block of one rank: elements [flat_begin, flat_begin + count) of the flat buffer
// are elements [shard_begin, shard_begin + count) of that rank's shard.
struct ShardPiece {
  size_t flat_begin = 0, shard_begin = 0, count = 0;
};

class ShardLayout {
 public:
  // spans / total: the model's tensors in the flat buffer; elem_bytes: of the reduced gradients;
  // bucket sizes as the reducer's (rounded down to whole world x kShardAlign elements, at least one).
  ShardLayout(const std::vector<TensorSpan>& spans, size_t total, size_t elem_bytes, size_t first_bucket_bytes,
              size_t bucket_bytes, int world, int rank);

  int world() const { return world_; }
  int rank() const { return rank_; }
  size_t total() const { return total_; }            // model elements
  size_t padded() const { return padded_; }          // buffer elements (total + padding)
  size_t shard_size() const { return padded_ / size_t(world_); }
  const std::vector<Bucket>& buckets() const { return buckets_; }  // in reduction order (from the end)
  // Rank r's block of bucket b (b indexes buckets()).
  ShardPiece piece(size_t b, int r) const;
  // This rank's shard: tensor t's range in it (count 0 when it holds none of tensor t).
  std::vector<TensorSpan> shard_spans(const std::vector<TensorSpan>& spans) const;

  // The elements of flat range [f0, f1) (padding included when asked for) that this rank's shard
  // holds, as runs fn(flat_begin, shard_begin, count), bucket by bucket.
  void flat_runs(size_t f0, size_t f1, const std::function<void(size_t flat, size_t shard, size_t count)>& fn) const;

  // Host arrays of FP32 values. gathered: every rank's shard, in rank order (world x shard_size);
  // flat: the model's elements (total).
  void shards_to_flat(const float* gathered, float* flat) const;
  void flat_to_shard(const float* flat, float* shard) const;  // this rank's shard (padding zero)

 private:
  int world_, rank_;
  size_t total_, padded_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> shard_off_;  // per bucket: where its blocks lie in every rank's shard
};

}  // namespace amp
