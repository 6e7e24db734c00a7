#include "comm/shard_layout.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace amp {

ShardLayout::ShardLayout(const std::vector<TensorSpan>& spans, size_t total, size_t elem_bytes,
                         size_t first_bucket_bytes, size_t bucket_bytes, int world, int rank)
    : world_(world), rank_(rank), total_(total) {
  AMP_CHECK(world >= 1 && rank >= 0 && rank < world, "shard layout: rank ", rank, " of ", world);
  const size_t unit = size_t(world) * kShardAlign;
  padded_ = (total + unit - 1) / unit * unit;
  // Whole units per bucket, so that every bucket (the remainder at the front too) splits into
  // world aligned blocks.
  const auto round = [&](size_t bytes) { return std::max<size_t>(1, bytes / elem_bytes / unit) * unit * elem_bytes; };
  buckets_ = make_buckets(spans, padded_, elem_bytes, round(first_bucket_bytes), round(bucket_bytes), true);
  size_t covered = 0;
  for (const Bucket& b : buckets_) {
    AMP_CHECK((b.end - b.begin) % unit == 0 && b.begin % unit == 0, "shard layout: bucket [", b.begin, ", ", b.end,
              ") is not whole units of ", unit);
    covered += b.end - b.begin;
  }
  AMP_CHECK(covered == padded_, "shard layout: buckets cover ", covered, " of ", padded_, " elements");
  // Blocks in flat order within each shard: the bucket with the lowest offset first.
  std::vector<size_t> order(buckets_.size());
  for (size_t b = 0; b < order.size(); ++b) order[b] = b;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return buckets_[a].begin < buckets_[b].begin; });
  shard_off_.assign(buckets_.size(), 0);
  size_t off = 0;
  for (size_t b : order) {
    shard_off_[b] = off;
    off += (buckets_[b].end - buckets_[b].begin) / size_t(world_);
  }
}

ShardPiece ShardLayout::piece(size_t b, int r) const {
  const Bucket& bk = buckets_[b];
  const size_t block = (bk.end - bk.begin) / size_t(world_);
  return ShardPiece{bk.begin + size_t(r) * block, shard_off_[b], block};
}

std::vector<TensorSpan> ShardLayout::shard_spans(const std::vector<TensorSpan>& spans) const {
  std::vector<TensorSpan> out(spans.size());
  for (size_t t = 0; t < spans.size(); ++t) {
    const size_t tb = spans[t].offset, te = tb + spans[t].count;
    size_t lo = 0, hi = 0;  // the tensor's range in this shard
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const ShardPiece p = piece(b, rank_);
      const size_t b0 = std::max(tb, p.flat_begin), b1 = std::min(te, p.flat_begin + p.count);
      if (b0 >= b1) continue;
      const size_t s0 = p.shard_begin + (b0 - p.flat_begin), s1 = s0 + (b1 - b0);
      if (hi == lo) {
        lo = s0;
        hi = s1;
      } else {
        lo = std::min(lo, s0);
        hi = std::max(hi, s1);
      }
    }
    out[t] = TensorSpan{hi > lo ? lo : 0, hi - lo};
  }
  // Each tensor's pieces are contiguous in the shard (its blocks follow each other in flat order);
  // check it: the ranges must add up to the elements the blocks hold.
  size_t held = 0, sum = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const ShardPiece p = piece(b, rank_);
    for (const TensorSpan& s : spans) {
      const size_t lo = std::max(s.offset, p.flat_begin), hi = std::min(s.offset + s.count, p.flat_begin + p.count);
      held += hi > lo ? hi - lo : 0;
    }
  }
  for (const TensorSpan& s : out) sum += s.count;
  AMP_CHECK(held == sum, "shard layout: tensor ranges in the shard are not contiguous (", sum, " vs ", held, ")");
  return out;
}

void ShardLayout::flat_runs(size_t f0, size_t f1,
                            const std::function<void(size_t flat, size_t shard, size_t count)>& fn) const {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const ShardPiece p = piece(b, rank_);
    const size_t lo = std::max(f0, p.flat_begin), hi = std::min(f1, p.flat_begin + p.count);
    if (lo < hi) fn(lo, p.shard_begin + (lo - p.flat_begin), hi - lo);
  }
}

void ShardLayout::shards_to_flat(const float* gathered, float* flat) const {
  const size_t shard = shard_size();
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (int r = 0; r < world_; ++r) {
      const ShardPiece p = piece(b, r);
      if (p.flat_begin >= total_) continue;
      const size_t n = std::min(p.count, total_ - p.flat_begin);
      std::memcpy(flat + p.flat_begin, gathered + size_t(r) * shard + p.shard_begin, n * sizeof(float));
    }
}

void ShardLayout::flat_to_shard(const float* flat, float* shard) const {
  std::fill(shard, shard + shard_size(), 0.0f);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const ShardPiece p = piece(b, rank_);
    if (p.flat_begin >= total_) continue;
    const size_t n = std::min(p.count, total_ - p.flat_begin);
    std::memcpy(shard + p.shard_begin, flat + p.flat_begin, n * sizeof(float));
  }
}

}  // namespace amp
