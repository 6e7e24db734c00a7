// The MPI communicator: every dtype and op with exact expectations on rank-valued data, 16-bit
// sums that overflow, NaN propagation, non-blocking ordering, and gradient buckets that split tensors.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "amp/overflow_flags.h"
#include "comm/grad_reducer.h"
#include "comm/shard_layout.h"
#include "backend/cpu/cpu_backend.h"
#include "core/convert.h"
#include "core/half.h"
#include "mpi_env.h"

using namespace amp;

namespace {

// Element i of rank r: (r + 1) * (i % 7 + 1); sums, maxima and averages are exact in every dtype.
double value(int r, size_t i) { return double(r + 1) * double(i % 7 + 1); }

template <typename T>
std::vector<T> fill(DType t, int r, size_t n) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) {
    const float f = float(value(r, i));
    if (t == DType::I32) reinterpret_cast<int32_t*>(v.data())[i] = int32_t(f);
    else if (t == DType::U8) reinterpret_cast<uint8_t*>(v.data())[i] = uint8_t(f);
    else convert(&f, DType::F32, &v[i], t, 1);
  }
  return v;
}

template <typename T>
double read(const std::vector<T>& v, DType t, size_t i) {
  if (t == DType::I32) return double(reinterpret_cast<const int32_t*>(v.data())[i]);
  if (t == DType::U8) return double(reinterpret_cast<const uint8_t*>(v.data())[i]);
  float f;
  convert(&v[i], t, &f, DType::F32, 1);
  return f;
}

template <typename T>
void check_type(DType t, bool nonblocking) {
  Communicator& c = world();
  const int n = c.size(), r = c.rank();
  for (size_t count : {size_t(0), size_t(1), size_t(1000), size_t((1 << 20) + 3)}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg}) {
      if (op == ReduceOp::Avg && (t == DType::I32 || t == DType::U8)) continue;
      std::vector<T> v = fill<T>(t, r, count);
      BufView b{v.data(), count, t};
      if (nonblocking) c.iallreduce(b, op)->wait();
      else c.allreduce(b, op);
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i) {
        const double k = double(i % 7 + 1);
        const double expect = op == ReduceOp::Sum   ? k * n * (n + 1) / 2.0
                              : op == ReduceOp::Max ? k * n
                                                    : k * (n + 1) / 2.0;
        wrong += read(v, t, i) != expect;
      }
      INFO(dtype_name(t) << " " << reduce_op_name(op) << " count " << count << (nonblocking ? " (non-blocking)" : ""));
      CHECK(wrong == 0);
    }
  }
}

}  // namespace

TEST_CASE("all-reduce: every dtype and op, exact", "[mpi][allreduce]") {
  for (bool nb : {false, true}) {
    check_type<float>(DType::F32, nb);
    check_type<uint16_t>(DType::F16, nb);
    check_type<uint16_t>(DType::BF16, nb);
    check_type<int32_t>(DType::I32, nb);
    check_type<uint8_t>(DType::U8, nb);
  }
}

TEST_CASE("all-reduce: 16-bit sums that overflow become inf; NaN propagates", "[mpi][allreduce]") {
  Communicator& c = world();
  const int n = c.size();
  // fp16: 40000 per rank sums past 65504 on 2+ ranks; bf16: 2^127 per rank past FLT_MAX.
  std::vector<uint16_t> h(5, float_to_half_bits(40000.0f)), b(5, float_to_bf16_bits(std::ldexp(1.0f, 127)));
  h[1] = float_to_half_bits(1.0f);
  if (c.rank() == n - 1) h[2] = float_to_half_bits(std::nanf("")), b[2] = float_to_bf16_bits(std::nanf(""));
  std::vector<uint16_t> hmax = h;
  c.allreduce(BufView{h.data(), h.size(), DType::F16}, ReduceOp::Sum);
  c.allreduce(BufView{b.data(), b.size(), DType::BF16}, ReduceOp::Sum);
  c.allreduce(BufView{hmax.data(), hmax.size(), DType::F16}, ReduceOp::Max);
  if (n >= 2) {
    CHECK(std::isinf(half_bits_to_float(h[0])));
    CHECK(std::isinf(bf16_bits_to_float(b[0])));
  } else {
    CHECK(half_bits_to_float(h[0]) == 40000.0f);
  }
  CHECK(half_bits_to_float(h[1]) == float(n));
  CHECK(std::isnan(half_bits_to_float(h[2])));
  CHECK(std::isnan(bf16_bits_to_float(b[2])));
  CHECK(std::isnan(half_bits_to_float(hmax[2])));  // max propagates NaN too
  CHECK(half_bits_to_float(hmax[0]) == 40000.0f);
  std::vector<float> f(3, 1.0f);
  if (c.rank() == 0) f[1] = std::nanf("");
  c.allreduce(view_of(f.data(), f.size()), ReduceOp::Max);
  CHECK(std::isnan(f[1]));
  CHECK(f[0] == 1.0f);
}

TEST_CASE("non-blocking all-reduces complete in issue order and report their time", "[mpi][allreduce]") {
  Communicator& c = world();
  std::vector<std::vector<float>> bufs(6, std::vector<float>(4096));
  std::vector<std::unique_ptr<Request>> reqs;
  for (size_t k = 0; k < bufs.size(); ++k) {
    for (size_t i = 0; i < bufs[k].size(); ++i) bufs[k][i] = float(k + 1) * float(c.rank() + 1);
    reqs.push_back(c.iallreduce(view_of(bufs[k].data(), bufs[k].size()), ReduceOp::Sum));
  }
  for (auto& r : reqs) r->wait();
  const int n = c.size();
  for (size_t k = 0; k < bufs.size(); ++k) CHECK(bufs[k][17] == float(k + 1) * float(n * (n + 1) / 2));
  CHECK(reqs.front()->test());
  CHECK(reqs.front()->seconds() >= 0.0);
}

TEST_CASE("broadcast, allgather and barrier", "[mpi]") {
  Communicator& c = world();
  std::vector<float> v(1000, float(c.rank()));
  if (c.rank() == 0)
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) * 0.5f;
  c.broadcast(view_of(v.data(), v.size()), 0);
  CHECK(v[999] == 499.5f);
  int mine = 100 + c.rank();
  std::vector<int> all(size_t(c.size()));
  c.allgather(&mine, all.data(), sizeof(int));
  for (int r = 0; r < c.size(); ++r) CHECK(all[size_t(r)] == 100 + r);
  c.barrier();
}

TEST_CASE("gradient buckets split tensors; the reducer sums every element and flags this rank's NaN", "[mpi][buckets]") {
  // Tensors of 1000, 64, 5000 and 10 elements (offsets padded to 32); buckets of 1200 and 3000
  // elements (2400 and 6000 bytes of fp16) cut through tensors.
  const std::vector<TensorSpan> spans = {{0, 1000}, {1024, 64}, {1088, 5000}, {6112, 10}};
  const size_t total = 6144;
  const auto buckets = make_buckets(spans, total, 2, 2400, 6000);
  REQUIRE(buckets.size() == 3);
  CHECK(buckets[0].begin == total - 1200);
  CHECK(buckets[0].end == total);
  CHECK(buckets[0].first_tensor == 2);  // the first bucket holds the tail of tensor 2 and tensor 3
  CHECK(buckets[0].last_tensor == 3);
  CHECK(buckets[1].first_tensor == 2);  // tensor 2 is split across buckets 0, 1 and 2
  CHECK(buckets[2].begin == 0);
  CHECK(buckets[2].first_tensor == 0);
  CHECK(buckets[2].last_tensor == 2);
  size_t covered = 0;
  for (const auto& b : buckets) covered += b.end - b.begin;
  CHECK(covered == total);

  Communicator& c = world();
  CpuBackend be(1);
  for (DType t : {DType::F16, DType::BF16, DType::F32}) {
    Buffer g = be.memory().alloc(total * dtype_size(t));
    std::vector<int32_t> flags(size_t(2 + c.size()), 0);
    int32_t* my_flag = &flags[size_t(OverflowFlags::rank_slot(c.rank()))];
    GradReducer red(c, spans, total, t, g.data(), 2400, 6000,
                    [&](size_t begin, size_t end) { be.amp_kernels().find_nonfinite(g.data(), t, spans, begin, end, my_flag); });
    for (int step = 0; step < 2; ++step) {
      std::vector<float> host(total, 0.0f);
      for (const auto& s : spans)
        for (size_t i = s.offset; i < s.offset + s.count; ++i) host[i] = value(c.rank(), i);
      const bool plant = step == 1 && c.rank() == c.size() - 1;
      if (plant) host[3000] = std::nanf("");  // in tensor 2, in the middle bucket
      convert(host.data(), DType::F32, g.data(), t, total);
      std::fill(flags.begin(), flags.end(), 0);
      red.begin_step();
      for (int k = int(spans.size()) - 1; k >= 0; --k) red.tensor_ready(k);  // backward order
      red.finish();
      std::vector<float> out(total);
      convert(g.data(), t, out.data(), DType::F32, total);
      const int n = c.size();
      size_t wrong = 0;
      for (const auto& s : spans)
        for (size_t i = s.offset; i < s.offset + s.count; ++i) {
          if (step == 1 && i == 3000) continue;
          wrong += out[i] != float(double(i % 7 + 1) * n * (n + 1) / 2.0);
        }
      INFO(dtype_name(t) << " step " << step);
      CHECK(wrong == 0);
      if (step == 1 && n > 1) CHECK(std::isnan(out[3000]));
      CHECK(flags[size_t(2 + c.rank())] == (plant && n > 1 ? 3 : 0));  // 1 + tensor 2, on the planting rank only
      if (n > 1) CHECK(red.last_step().bytes == total * dtype_size(t));
    }
  }
}

TEST_CASE("reduce-scatter and in-place all-gather: every dtype, exact, blocking and not", "[mpi][zero]") {
  Communicator& c = world();
  const int n = c.size(), r = c.rank();
  const size_t block = 1000;
  for (DType t : {DType::F16, DType::BF16, DType::F32, DType::I32}) {
    INFO(dtype_name(t));
    const std::vector<float> send = fill<float>(DType::F32, r, size_t(n) * block);
    std::vector<char> raw(send.size() * dtype_size(t));
    for (size_t i = 0; i < send.size(); ++i) {
      const float f = send[i];
      if (t == DType::I32) reinterpret_cast<int32_t*>(raw.data())[i] = int32_t(f);
      else convert(&f, DType::F32, raw.data() + i * dtype_size(t), t, 1);
    }
    for (bool blocking : {true, false}) {
      std::vector<char> recv(block * dtype_size(t));
      const BufView view{recv.data(), block, t};
      if (blocking) c.reduce_scatter(raw.data(), view, ReduceOp::Sum);
      else c.ireduce_scatter(raw.data(), view, ReduceOp::Sum)->wait();
      size_t wrong = 0;
      for (size_t i = 0; i < block; ++i) {
        const size_t at = size_t(r) * block + i;
        double got;
        if (t == DType::I32) got = reinterpret_cast<const int32_t*>(recv.data())[i];
        else {
          float f;
          convert(recv.data() + i * dtype_size(t), t, &f, DType::F32, 1);
          got = f;
        }
        wrong += got != double(at % 7 + 1) * n * (n + 1) / 2.0;
      }
      CHECK(wrong == 0);
    }
    // In place: this rank's block is its own; the others arrive.
    std::vector<char> all(size_t(n) * block * dtype_size(t), 0);
    std::memcpy(all.data() + size_t(r) * block * dtype_size(t), raw.data() + size_t(r) * block * dtype_size(t),
                block * dtype_size(t));
    c.allgather_in_place(BufView{all.data(), size_t(n) * block, t});
    size_t wrong = 0;
    for (int q = 0; q < n; ++q) {
      const std::vector<float> v = fill<float>(DType::F32, q, size_t(n) * block);
      for (size_t i = 0; i < block; ++i) {
        const size_t at = size_t(q) * block + i;
        float f;
        if (t == DType::I32) f = float(reinterpret_cast<const int32_t*>(all.data())[at]);
        else convert(all.data() + at * dtype_size(t), t, &f, DType::F32, 1);
        wrong += f != v[at];
      }
    }
    CHECK(wrong == 0);
  }
}

namespace {

// What a rank's shard holds after the reduce-scatter of value(): the sum over the n ranks of every
// element of its blocks (0 in gaps and padding).
std::vector<float> expected_shard(const ShardLayout& Lt, const std::vector<TensorSpan>& spans, size_t total, int n) {
  std::vector<float> flat_sum(total, 0.0f), want(Lt.shard_size());
  for (const auto& s : spans)
    for (size_t i = s.offset; i < s.offset + s.count; ++i) flat_sum[i] = float(double(i % 7 + 1) * n * (n + 1) / 2.0);
  Lt.flat_to_shard(flat_sum.data(), want.data());
  return want;
}

// One step of a sharded reducer: backward completes the tensors last to first; this rank's reduced
// shard, in FP32.
std::vector<float> reduce_step(GradReducer& red, bool overlap, size_t tensors, const Buffer& shard, DType t,
                               size_t shard_size) {
  red.set_overlap(overlap);
  red.begin_step();
  for (int k = int(tensors) - 1; k >= 0; --k) red.tensor_ready(k);
  red.finish();
  std::vector<float> mine(shard_size);
  convert(shard.data(), t, mine.data(), DType::F32, mine.size());
  return mine;
}

// The sharded reducer tests' tensors: padded gaps between them, a small one among large ones.
const std::vector<TensorSpan> kShardSpans = {{0, 1000}, {1024, 64}, {1088, 5000}, {6112, 10}};
constexpr size_t kShardTotal = 6122;

}  // namespace

TEST_CASE("sharded reducer: each rank's shard holds the sum of its blocks, the all-gather rebuilds the buffer",
          "[mpi][zero]") {
  Communicator& c = world();
  const int n = c.size();
  if (n < 2) return;  // the reducer is inactive on one rank
  const std::vector<TensorSpan>& spans = kShardSpans;
  const size_t total = kShardTotal;
  CpuBackend be(1);
  for (DType t : {DType::F16, DType::BF16, DType::F32}) {
    INFO(dtype_name(t));
    const ShardLayout Lt(spans, total, dtype_size(t), 2400, 6000, n, c.rank());
    Buffer g = be.memory().alloc(Lt.padded() * dtype_size(t)), shard = be.memory().alloc(Lt.shard_size() * dtype_size(t));
    GradReducer red(c, spans, total, t, g.data(), 2400, 6000, nullptr);
    red.shard(Lt, shard.data());
    std::vector<float> host(Lt.padded(), 0.0f);
    for (const auto& s : spans)
      for (size_t i = s.offset; i < s.offset + s.count; ++i) host[i] = float(value(c.rank(), i));
    convert(host.data(), DType::F32, g.data(), t, host.size());
    for (bool overlap : {true, false}) {
      const std::vector<float> mine = reduce_step(red, overlap, spans.size(), shard, t, Lt.shard_size());
      CHECK(mine == expected_shard(Lt, spans, total, n));
    }
    // The gather: every rank's blocks (here: rank-specific marks) end up everywhere.
    std::vector<float> marks(Lt.padded(), -1.0f);
    for (size_t b = 0; b < Lt.buckets().size(); ++b) {
      const ShardPiece p = Lt.piece(b, c.rank());
      for (size_t i = 0; i < p.count; ++i) marks[p.flat_begin + i] = float(c.rank() + 1);
    }
    convert(marks.data(), DType::F32, g.data(), t, marks.size());
    red.gather_shards(g.data(), t);
    std::vector<float> back(Lt.padded());
    convert(g.data(), t, back.data(), DType::F32, back.size());
    size_t wrong = 0;
    for (size_t b = 0; b < Lt.buckets().size(); ++b)
      for (int q = 0; q < n; ++q) {
        const ShardPiece p = Lt.piece(b, q);
        for (size_t i = 0; i < p.count; ++i) wrong += back[p.flat_begin + i] != float(q + 1);
      }
    CHECK(wrong == 0);
  }
}

TEST_CASE("sharded reducer: the overlapped all-gather gives each tensor its ranks' blocks once waited for, "
          "the blocking one's bytes", "[mpi][zero]") {
  Communicator& c = world();
  const int n = c.size();
  if (n < 2) return;  // the reducer is inactive on one rank
  const std::vector<TensorSpan>& spans = kShardSpans;
  const size_t total = kShardTotal;
  CpuBackend be(1);
  for (DType t : {DType::F16, DType::F32}) {
    INFO(dtype_name(t));
    const size_t es = dtype_size(t);
    const ShardLayout Lt(spans, total, es, 2400, 3000, n, c.rank());
    REQUIRE(Lt.buckets().size() >= 3);
    Buffer g = be.memory().alloc(Lt.padded() * es), shard = be.memory().alloc(Lt.shard_size() * es);
    GradReducer red(c, spans, total, t, g.data(), 2400, 3000, nullptr);
    red.shard(Lt, shard.data());
    // Every rank writes distinct values into its own blocks (and garbage elsewhere).
    std::vector<float> mine(Lt.padded(), -7.0f);
    for (size_t b = 0; b < Lt.buckets().size(); ++b) {
      const ShardPiece p = Lt.piece(b, c.rank());
      for (size_t i = 0; i < p.count; ++i) mine[p.flat_begin + i] = float(c.rank() * 1000 + int((p.flat_begin + i) % 997));
    }
    std::vector<char> want(Lt.padded() * es), got(Lt.padded() * es);
    convert(mine.data(), DType::F32, g.data(), t, mine.size());
    red.gather_shards(g.data(), t);
    std::memcpy(want.data(), g.data(), want.size());
    for (bool settle_first : {false, true}) {
      convert(mine.data(), DType::F32, g.data(), t, mine.size());
      red.launch_gathers(g.data(), t);
      if (settle_first) {
        red.settle_gathers();
      } else {
        // As the forward pass: tensor by tensor, each complete once its wait returns.
        for (int k = 0; k < int(spans.size()); ++k) {
          red.wait_gathered(k, k);
          const TensorSpan& s = spans[size_t(k)];
          INFO("tensor " << k);
          CHECK(std::memcmp(static_cast<char*>(g.data()) + s.offset * es, want.data() + s.offset * es, s.count * es) == 0);
        }
        red.settle_gathers();
      }
      std::memcpy(got.data(), g.data(), got.size());
      CHECK(got == want);
    }
  }
}

TEST_CASE("stage 2 reducer: stage 1's shards, and every bucket's pages returned once it is reduced", "[mpi][zero]") {
  Communicator& c = world();
  const int n = c.size();
  if (n < 2) return;  // the reducer is inactive on one rank
  // Buckets of several pages that split tensors, so that pages are shared at their edges.
  const std::vector<TensorSpan> spans = {{0, 2'000'000}, {2'000'032, 64}, {2'000'096, 5'000'000}, {7'000'096, 10}};
  const size_t total = 7'000'106;
  CpuBackend be(1);
  DeviceMemory& mem = be.memory();
  const size_t page = mem.release_granularity();
  REQUIRE(page > 0);
  for (DType t : {DType::F16, DType::F32}) {
    INFO(dtype_name(t));
    const size_t es = dtype_size(t);
    const size_t first = 3 * page + 12345, bucket = 5 * page + 1000;  // not whole pages
    const ShardLayout Lt(spans, total, es, first, bucket, n, c.rank());
    Buffer g = mem.alloc_releasable(Lt.padded() * es), shard = mem.alloc(Lt.shard_size() * es);
    GradReducer red(c, spans, total, t, g.data(), first, bucket, nullptr);
    red.shard(Lt, shard.data());
    std::vector<std::pair<size_t, size_t>> returned;  // byte ranges of g, as handed to the backend
    red.release_reduced([&](void* p, size_t bytes) {
      const size_t at = size_t(static_cast<char*>(p) - static_cast<char*>(g.data()));
      returned.emplace_back(at, at + bytes);
      mem.release(p, bytes);
    }, page);
    std::vector<float> host(Lt.padded(), 0.0f);
    for (const auto& s : spans)
      for (size_t i = s.offset; i < s.offset + s.count; ++i) host[i] = float(value(c.rank(), i));
    const std::vector<float> want = expected_shard(Lt, spans, total, n);
    for (bool overlap : {true, false}) {
      INFO("overlap " << overlap);
      mem.commit(g.data(), g.bytes());  // backward brings back the pages of the step before,
      convert(host.data(), DType::F32, g.data(), t, host.size());  // then writes the gradients
      CHECK(mem.resident_bytes(g.data(), g.bytes()) >= g.bytes() / page * page);
      returned.clear();
      const std::vector<float> mine = reduce_step(red, overlap, spans.size(), shard, t, Lt.shard_size());
      CHECK(mine == want);  // nothing returned before it was reduced
      // Every bucket went back, in bucket order (from the buffer's end down), the ranges covering the
      // buffer; the backend kept only the partial pages at its two ends.
      REQUIRE(returned.size() == Lt.buckets().size());
      size_t covered = returned.front().second, bad = 0;
      for (const auto& [lo, hi] : returned) bad += hi < covered || lo > covered || lo >= hi, covered = lo;
      CHECK(bad == 0);
      CHECK(covered == 0);
      CHECK(returned.front().second == Lt.padded() * es);
      CHECK(mem.resident_bytes(g.data(), g.bytes()) <= 2 * page);
    }
  }
}
