// The NCCL communicator on device buffers (any number of ranks; one GPU per rank): sums, averages
// and maxima with closed-form results, non-blocking collectives ordered on the compute stream,
// broadcast, all-gather, barrier, an all-reduce captured into a CUDA graph, the asynchronous error
// check, and the step clock that times collectives of eager steps and of graph launches.
#include "comm/nccl/nccl_communicator.h"
#include "gpu_env.h"

using namespace amp;
using namespace gpu_test;

namespace {

std::unique_ptr<Backend> rank_backend() {
  REQUIRE(cuda_available());
  return make_backend("cuda", world().local_rank(), 1);
}

// The CUDA backend owns the compute stream NCCL orders its collectives with.
DeviceStream& stream_of(Backend& be) {
  auto* s = dynamic_cast<DeviceStream*>(&be);
  REQUIRE(s != nullptr);
  return *s;
}

}  // namespace

TEST_CASE("nccl: all-reduce sum, average and max with exact expectations", "[.cuda][nccl]") {
  auto be = rank_backend();
  NcclCommunicator comm(world(), stream_of(*be));
  const int n = comm.size(), r = comm.rank();
  const size_t count = 100001;
  // f32 and i32 sums of rank-valued integers are exact; 16-bit sums of small integers too.
  std::vector<float> f(count);
  std::vector<int32_t> k(count);
  for (size_t i = 0; i < count; ++i) {
    f[i] = float((r + 1) * int(i % 7 + 1));
    k[i] = (r + 1) * int(i % 11) - 5;
  }
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    INFO(dtype_name(dt));
    Buffer b = be->alloc(count * dtype_size(dt));
    std::vector<unsigned char> raw(count * dtype_size(dt));
    convert(f.data(), DType::F32, raw.data(), dt, count);
    be->upload(b.data(), raw.data(), raw.size());
    comm.allreduce(BufView{b.data(), count, dt}, ReduceOp::Sum);
    const std::vector<float> got = read(*be, b.tensor(dt, 1, count));
    const int ranks_sum = n * (n + 1) / 2;
    for (size_t i = 0; i < count; i += 997) REQUIRE(got[i] == float(ranks_sum * int(i % 7 + 1)));
    be->upload(b.data(), raw.data(), raw.size());
    comm.allreduce(BufView{b.data(), count, dt}, ReduceOp::Max);
    const std::vector<float> mx = read(*be, b.tensor(dt, 1, count));
    for (size_t i = 0; i < count; i += 997) REQUIRE(mx[i] == float(n * int(i % 7 + 1)));
  }
  Buffer kb = be->alloc(count * 4);
  be->upload(kb.data(), k.data(), count * 4);
  comm.allreduce(BufView{kb.data(), count, DType::I32}, ReduceOp::Sum);
  std::vector<int32_t> ks(count);
  be->download(ks.data(), kb.data(), count * 4);
  for (size_t i = 0; i < count; ++i) REQUIRE(ks[i] == (n * (n + 1) / 2) * int(i % 11) - 5 * n);
  // Average of f32: (sum of 1..n) / n.
  std::vector<float> one(8, float(r + 1));
  Buffer ab = be->alloc(8 * 4);
  be->upload(ab.data(), one.data(), 32);
  comm.allreduce(BufView{ab.data(), 8, DType::F32}, ReduceOp::Avg);
  CHECK(read(*be, ab.tensor(DType::F32, 1, 8))[3] == Approx(float(n + 1) / 2.0f));
  CHECK_THROWS(comm.allreduce(BufView{kb.data(), 4, DType::I32}, ReduceOp::Avg));
}

TEST_CASE("nccl: non-blocking all-reduces are ordered after earlier compute and before later compute",
          "[.cuda][nccl]") {
  auto be = rank_backend();
  NcclCommunicator comm(world(), stream_of(*be));
  const size_t count = 1 << 20;
  Buffer src = be->alloc(count * 4), b1 = be->alloc(count * 2), b2 = be->alloc(count * 2);
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = float(i % 5 + 1);
  be->upload(src.data(), v.data(), count * 4);
  // Compute writes the buffers (cast), the collectives must see those values...
  be->cast(src.data(), DType::F32, b1.data(), DType::F16, count);
  auto r1 = comm.iallreduce(BufView{b1.data(), count, DType::F16}, ReduceOp::Sum);
  be->cast(src.data(), DType::F32, b2.data(), DType::BF16, count);
  auto r2 = comm.iallreduce(BufView{b2.data(), count, DType::BF16}, ReduceOp::Sum);
  r1->wait();
  r2->wait();
  // ...and compute after wait() must see the reduced values.
  Buffer out = be->alloc(count * 4);
  be->cast(b1.data(), DType::F16, out.data(), DType::F32, count);
  const std::vector<float> got = read(*be, out.tensor(DType::F32, 1, count));
  const float n = float(comm.size());
  for (size_t i = 0; i < count; i += 4099) REQUIRE(got[i] == n * float(i % 5 + 1));
  be->synchronize();
  CHECK(r1->test());
  CHECK(r2->seconds() >= 0.0);
}

TEST_CASE("nccl: broadcast, all-gather and barrier", "[.cuda][nccl]") {
  auto be = rank_backend();
  NcclCommunicator comm(world(), stream_of(*be));
  const int n = comm.size(), r = comm.rank();
  std::vector<int32_t> v(1000, r == 0 ? 42 : -1);
  Buffer b = be->alloc(v.size() * 4);
  be->upload(b.data(), v.data(), v.size() * 4);
  comm.broadcast(BufView{b.data(), v.size(), DType::I32}, 0);
  std::vector<int32_t> got(v.size());
  be->download(got.data(), b.data(), got.size() * 4);
  CHECK(got == std::vector<int32_t>(v.size(), 42));
  const int32_t mine[2] = {r, 10 * r};
  Buffer s = be->alloc(8), all = be->alloc(size_t(n) * 8);
  be->upload(s.data(), mine, 8);
  comm.allgather(s.data(), all.data(), 8);
  std::vector<int32_t> g(size_t(n) * 2);
  be->download(g.data(), all.data(), g.size() * 4);
  for (int q = 0; q < n; ++q) CHECK((g[size_t(q) * 2] == q && g[size_t(q) * 2 + 1] == 10 * q));
  comm.barrier();
}

TEST_CASE("nccl: reduce-scatter of FP16 blocks and the in-place all-gather (ZeRO stage 1), exact",
          "[.cuda][nccl]") {
  auto be = rank_backend();
  NcclCommunicator comm(world(), stream_of(*be));
  const int n = comm.size(), r = comm.rank();
  const size_t block = 96;  // small integers: every sum exact in FP16
  std::vector<float> send(size_t(n) * block);
  for (size_t i = 0; i < send.size(); ++i) send[i] = float((i % 7) + r);
  std::vector<uint16_t> h(send.size());
  convert(send.data(), DType::F32, h.data(), DType::F16, send.size());
  Buffer s = be->alloc(h.size() * 2), recv = be->alloc(block * 2);
  be->upload(s.data(), h.data(), h.size() * 2);
  comm.reduce_scatter(s.data(), BufView{recv.data(), block, DType::F16}, ReduceOp::Sum);
  std::vector<uint16_t> got16(block);
  be->download(got16.data(), recv.data(), block * 2);
  std::vector<float> got(block);
  convert(got16.data(), DType::F16, got.data(), DType::F32, block);
  for (size_t i = 0; i < block; ++i) {
    const size_t at = size_t(r) * block + i;
    CHECK(got[i] == float(n) * float(at % 7) + float(n * (n - 1) / 2));
  }
  // In place: each rank writes its block, the all-gather fills the others.
  std::vector<int32_t> all(size_t(n) * block, -1);
  for (size_t i = 0; i < block; ++i) all[size_t(r) * block + i] = int32_t(1000 * r + int(i));
  Buffer a = be->alloc(all.size() * 4);
  be->upload(a.data(), all.data(), all.size() * 4);
  comm.allgather_in_place(BufView{a.data(), all.size(), DType::I32});
  be->download(all.data(), a.data(), all.size() * 4);
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < block; ++i) CHECK(all[size_t(q) * block + i] == int32_t(1000 * q + int(i)));
}

TEST_CASE("nccl: an all-reduce inside a captured step replays", "[.cuda][nccl]") {
  auto be = rank_backend();
  const size_t count = 4096;
  Buffer src = be->alloc(count * 4), buf = be->alloc(count * 4);
  {
    NcclCommunicator comm(world(), stream_of(*be));
    std::vector<float> v(count, float(comm.rank() + 1));
    be->upload(src.data(), v.data(), count * 4);
    auto step = [&] {
      be->cast(src.data(), DType::F32, buf.data(), DType::F32, count);  // reset the buffer on the stream
      auto req = comm.iallreduce(BufView{buf.data(), count, DType::F32}, ReduceOp::Sum);
      req->wait();
    };
    step();  // eager warm-up
    REQUIRE(be->begin_capture());
    step();
    be->end_capture();
    const float want = float(comm.size() * (comm.size() + 1) / 2);
    for (int i = 0; i < 3; ++i) {
      be->replay();
      CHECK(read(*be, buf.tensor(DType::F32, 1, count))[count - 1] == want);
    }
    // The communicator goes first, as in the trainer: NCCL waits for graphs holding its collectives
    // to be destroyed, so it drops the backend's graph (else this would hang with several ranks).
  }
  CHECK_THROWS_WITH(be->replay(), Catch::Contains("replay without a captured graph"));
}

TEST_CASE("nccl: check_async_errors on a healthy communicator does not throw", "[.cuda][nccl]") {
  auto be = rank_backend();
  const size_t count = 1 << 16;
  Buffer buf = be->alloc(count * 2);
  {
    NcclCommunicator comm(world(), stream_of(*be));
    CHECK_NOTHROW(comm.check_async_errors());
    comm.allreduce(BufView{buf.data(), count, DType::F16}, ReduceOp::Sum);
    CHECK_NOTHROW(comm.check_async_errors());  // right after enqueueing: may still run
    be->synchronize();                         // polls the same check while it waits
    CHECK_NOTHROW(comm.check_async_errors());
    // Inside and after a captured step, as the trainer calls it at the start of every step.
    auto step = [&] { comm.iallreduce(BufView{buf.data(), count, DType::F16}, ReduceOp::Sum)->wait(); };
    step();
    REQUIRE(be->begin_capture());
    step();
    be->end_capture();
    for (int i = 0; i < 3; ++i) {
      CHECK_NOTHROW(comm.check_async_errors());
      be->replay();
    }
    be->synchronize();
    CHECK_NOTHROW(comm.check_async_errors());
    comm.barrier();
  }
  be->synchronize();  // the communicator took its check off the backend's waits when it went
}

TEST_CASE("nccl: the step clock reads eager steps and each completed graph launch once", "[.cuda][nccl]") {
  auto be = rank_backend();
  const size_t count = size_t(8) << 20;  // 16 MiB of f16: the collective takes measurable time
  Buffer src = be->alloc(count * 4), buf = be->alloc(count * 2);
  {
    NcclCommunicator comm(world(), stream_of(*be));
    StepClock& clock = comm;
    double c = -1, e = -1;
    CHECK_FALSE(clock.clock_poll(&c, &e));  // nothing measured yet
    auto step = [&] {
      clock.clock_begin_step();
      be->cast(src.data(), DType::F32, buf.data(), DType::F16, count);  // compute before the collective
      auto r1 = comm.iallreduce(BufView{buf.data(), count / 2, DType::F16}, ReduceOp::Sum);
      auto r2 = comm.iallreduce(BufView{static_cast<char*>(buf.data()) + count, count / 2, DType::F16}, ReduceOp::Sum);
      clock.clock_wait_begins();
      r1->wait();
      r2->wait();
      clock.clock_wait_ends();
      // After the step: the flag all-reduce of the trainer, outside the clock's step.
      comm.allreduce(BufView{buf.data(), 8, DType::F16}, ReduceOp::Max);
    };
    auto check_times = [&] {
      INFO("comm " << c << " s, exposed " << e << " s");
      CHECK(c >= 0.0);
      CHECK(c < 1.0);
      CHECK(e >= 0.0);
      CHECK(e < 1.0);
    };
    for (int i = 0; i < 2; ++i) step();  // eager
    be->synchronize();
    REQUIRE(clock.clock_poll(&c, &e));  // the later of the two
    check_times();
    CHECK_FALSE(clock.clock_poll(&c, &e));  // read once
    REQUIRE(be->begin_capture());
    step();
    CHECK_FALSE(clock.clock_poll(&c, &e));  // never during a capture
    be->end_capture();
    CHECK_FALSE(clock.clock_poll(&c, &e));  // captured, not launched yet
    be->replay();
    be->synchronize();
    REQUIRE(clock.clock_poll(&c, &e));
    check_times();
    CHECK_FALSE(clock.clock_poll(&c, &e));  // the same launch is not read twice
    be->replay();
    be->replay();
    be->synchronize();
    REQUIRE(clock.clock_poll(&c, &e));  // the latest launch; the one before it is lost
    check_times();
    CHECK_FALSE(clock.clock_poll(&c, &e));
    // An eager step after the graph's launches is read too.
    step();
    be->synchronize();
    REQUIRE(clock.clock_poll(&c, &e));
    check_times();
  }
}

TEST_CASE("nccl: the gradient reducer measures eager and replayed steps", "[.cuda][nccl]") {
  // With one rank the reducer has nothing to reduce (and measures nothing); with several (one GPU
  // each) it measures every step whose events completed before the next step was enqueued.
  auto be = rank_backend();
  std::vector<TensorSpan> spans{{0, 300000}, {300032, 700000}, {1000064, 5000}};
  const size_t total = 1005088;
  Buffer grads = be->alloc(total * 2), flags = be->alloc(64);
  NcclCommunicator comm(world(), stream_of(*be));
  int32_t* my_flag = flags.as<int32_t>() + OverflowFlags::rank_slot(comm.rank());
  GradReducer red(comm, spans, total, DType::F16, grads.data(), 1 << 20, 1 << 20, [&](size_t begin, size_t end) {
    be->find_nonfinite(grads.data(), DType::F16, spans, begin, end, my_flag);
  });
  auto step = [&] {
    red.begin_step();
    for (int t = int(spans.size()) - 1; t >= 0; --t) red.tensor_ready(t);
    red.finish();
  };
  int64_t seen = red.last_step().measured;
  CHECK(seen == 0);
  for (int s = 1; s <= 6; ++s) {
    if (s < 3) {
      step();
    } else if (s == 3) {
      REQUIRE(be->begin_capture());
      step();
      be->end_capture();
      be->replay();
    } else {
      be->replay();
    }
    be->synchronize();  // as at a log step: the step's events have completed before the next one
    const ReducerStats& rs = red.last_step();
    INFO("step " << s << ": comm " << rs.comm_seconds << " s, exposed " << rs.exposed_seconds << " s");
    if (comm.size() == 1) {
      CHECK(rs.measured == 0);
      continue;
    }
    CHECK(rs.measured == seen + 1);
    CHECK(rs.bytes == total * 2);  // the buckets cover the padding between tensors too
    CHECK(rs.comm_seconds > 0.0);
    CHECK(rs.exposed_seconds >= 0.0);
    seen = rs.measured;
  }
}
