// Sharded optimizer state (ZeRO stage 1): the shard layout's invariants for many tensor shapes,
// world sizes and bucket sizes, host round trips, the partial norms' slots, and the sampler continuing from a recorded data
// position under another global batch.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "amp/overflow_flags.h"
#include "comm/shard_layout.h"
#include "core/rng.h"
#include "data/sampler.h"

using namespace amp;

namespace {

std::vector<TensorSpan> random_spans(Rng& rng, size_t* total) {
  std::vector<TensorSpan> spans;
  size_t off = 0;
  const size_t count = 1 + rng.next_u64() % 9;
  for (size_t t = 0; t < count; ++t) {
    const size_t n = 1 + rng.next_u64() % (rng.next_u64() % 2 ? 50 : 20000);
    spans.push_back({off, n});
    off += n + (rng.next_u64() % 3 == 0 ? rng.next_u64() % 40 : 0);  // gaps, as a layout's alignment leaves
  }
  *total = off;
  return spans;
}

}  // namespace

TEST_CASE("shard layout: aligned equal shards, buckets cover the buffer, tensor ranges contiguous", "[zero]") {
  Rng rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    size_t total = 0;
    const std::vector<TensorSpan> spans = random_spans(rng, &total);
    const int world = 1 + int(rng.next_u64() % 8);
    const size_t es = rng.next_u64() % 2 ? 2 : 4;
    const size_t first = 1 + rng.next_u64() % 40000, bucket = 1 + rng.next_u64() % 100000;
    INFO("trial " << trial << " world " << world << " total " << total);
    std::vector<std::vector<float>> shards;
    std::vector<float> flat(total);
    for (size_t i = 0; i < total; ++i) flat[i] = float(i) + 0.5f;
    std::vector<size_t> owner(0);
    for (int r = 0; r < world; ++r) {
      const ShardLayout L(spans, total, es, first, bucket, world, r);
      REQUIRE(L.padded() % (size_t(world) * kShardAlign) == 0);
      REQUIRE(L.padded() >= total);
      REQUIRE(L.padded() - total < size_t(world) * kShardAlign);
      if (owner.empty()) owner.assign(L.padded(), 0);
      size_t held = 0;
      for (size_t b = 0; b < L.buckets().size(); ++b) {
        const ShardPiece p = L.piece(b, r);
        CHECK(p.flat_begin % kShardAlign == 0);
        CHECK(p.shard_begin % kShardAlign == 0);
        CHECK(p.count % kShardAlign == 0);
        CHECK(p.shard_begin + p.count <= L.shard_size());
        for (size_t i = 0; i < p.count; ++i) ++owner[p.flat_begin + i];
        held += p.count;
      }
      CHECK(held == L.shard_size());
      // Each tensor's range in the shard is contiguous and holds exactly its elements there.
      const std::vector<TensorSpan> ss = L.shard_spans(spans);
      REQUIRE(ss.size() == spans.size());
      std::vector<float> mine(L.shard_size());
      L.flat_to_shard(flat.data(), mine.data());
      for (size_t t = 0; t < spans.size(); ++t)
        for (size_t i = ss[t].offset; i < ss[t].offset + ss[t].count; ++i) {
          const float v = mine[i];
          CHECK((v >= float(spans[t].offset) && v < float(spans[t].offset + spans[t].count)));
        }
      // The same shard loaded from pieces of the flat array (flat_runs), padding zeroed last.
      std::vector<float> pieced(L.shard_size(), -1.0f);
      const size_t step = 1 + rng.next_u64() % 5000;
      for (size_t b = 0; b < total; b += step) {
        const size_t e = std::min(total, b + step);
        L.flat_runs(b, e, [&](size_t f, size_t s, size_t n) {
          REQUIRE((f >= b && f + n <= e && s + n <= L.shard_size()));
          std::copy(flat.begin() + long(f), flat.begin() + long(f + n), pieced.begin() + long(s));
        });
      }
      L.flat_runs(total, L.padded(), [&](size_t, size_t s, size_t n) { std::fill_n(pieced.begin() + long(s), n, 0.0f); });
      CHECK(pieced == mine);
      shards.push_back(mine);
    }
    // Every element is owned by exactly one rank; the gathered shards rebuild the flat array.
    CHECK(std::count(owner.begin(), owner.end(), size_t(1)) == std::ptrdiff_t(owner.size()));
    const ShardLayout L0(spans, total, es, first, bucket, world, 0);
    std::vector<float> gathered;
    for (const auto& s : shards) gathered.insert(gathered.end(), s.begin(), s.end());
    std::vector<float> back(total, -1.0f);
    L0.shards_to_flat(gathered.data(), back.data());
    CHECK(back == flat);
  }
}

TEST_CASE("shard layout: one rank holds everything in flat order", "[zero]") {
  const std::vector<TensorSpan> spans = {{0, 100}, {128, 7}};
  const ShardLayout L(spans, 135, 2, 1 << 20, 1 << 20, 1, 0);
  CHECK(L.padded() == 160);
  const std::vector<TensorSpan> ss = L.shard_spans(spans);
  CHECK(ss[0].offset == 0);
  CHECK(ss[0].count == 100);
  CHECK(ss[1].offset == 128);
  CHECK(ss[1].count == 7);
}

TEST_CASE("sampler: a recorded position continues the same samples, and under another global batch consumes "
          "each sample of the epoch once",
          "[zero][data]") {
  const size_t n = 1000;
  // Unchanged batch: resuming at the position of step k gives the uninterrupted batches.
  ShardedSampler full(n, 16, 1, 4, 3, true);
  ShardedSampler resumed(n, 16, 1, 4, 3, true);
  const int64_t k = 37;  // into epoch 2 (15 steps per epoch)
  resumed.resume_at(k, full.position(k));
  for (int64_t s = k; s < k + 40; ++s) CHECK(resumed.batch(s) == full.batch(s));

  // 4 ranks x 16 for 10 steps, then 2 ranks x 8 from that position: the rest of the epoch is new
  // samples, each once, and the next epoch starts at its beginning.
  ShardedSampler a(n, 16, 0, 4, 3, true);
  std::vector<uint32_t> seen;
  for (int64_t s = 0; s < 10; ++s)
    for (int r = 0; r < 4; ++r) {
      ShardedSampler q(n, 16, r, 4, 3, true);
      const auto& b = q.batch(s);
      seen.insert(seen.end(), b.begin(), b.end());
    }
  const DataPosition pos = a.position(10);
  CHECK(pos.epoch == 0);
  CHECK(pos.offset == 640);
  const int64_t left = int64_t((n - 640) / 16);  // whole batches of 16 left in epoch 0
  for (int64_t s = 10; s < 10 + left; ++s)
    for (int r = 0; r < 2; ++r) {
      ShardedSampler q(n, 8, r, 2, 3, true);
      q.resume_at(10, pos);
      const auto& b = q.batch(s);
      seen.insert(seen.end(), b.begin(), b.end());
    }
  std::vector<uint32_t> sorted = seen;
  std::sort(sorted.begin(), sorted.end());
  CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());  // no sample twice in the epoch
  CHECK(seen.size() == 640 + size_t(left) * 16);
  ShardedSampler q(n, 8, 0, 2, 3, true);
  q.resume_at(10, pos);
  CHECK(q.position(10 + left).epoch == 1);
  CHECK(q.position(10 + left).offset == 0);
}

TEST_CASE("norm slots: a double's pieces are non-negative int32s that survive a MAX against zeros, exactly",
          "[zero][amp]") {
  Rng rng(3);
  const int world = 4;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<double> parts(world);
    std::vector<int32_t> reduced(OverflowFlags::count(world), 0);
    for (int r = 0; r < world; ++r) {
      parts[size_t(r)] = trial == 0 && r == 1 ? std::numeric_limits<double>::infinity()
                                              : std::ldexp(double(rng.next_u64() >> 11), int(rng.next_u64() % 200) - 150);
      std::vector<int32_t> mine(reduced.size(), 0);
      store_norm_partial(mine.data() + OverflowFlags::norm_slot(r, world), parts[size_t(r)]);
      for (size_t i = 0; i < mine.size(); ++i) {
        CHECK(mine[i] >= 0);
        reduced[i] = std::max(reduced[i], mine[i]);  // the MAX all-reduce of the flags
      }
    }
    double want = 0;
    for (int r = 0; r < world; ++r) {
      CHECK(load_norm_partial(reduced.data() + OverflowFlags::norm_slot(r, world)) == parts[size_t(r)]);
      want += parts[size_t(r)];
    }
    CHECK(sum_norm_partials(reduced.data(), world) == float(want));
  }
}
