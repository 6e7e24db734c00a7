// The device's gradient communicator (NCCL on device buffers; the MPI world on the CPU stand-in),
// any number of ranks, one GPU per rank: sums, averages and maxima with closed-form results,
// non-blocking collectives ordered on the compute stream, broadcast, all-gather, barrier, an
// all-reduce in a captured step, and the asynchronous error check on a healthy communicator.
#include "device_env.h"

using namespace amp;
using namespace gpu_test;

TEST_CASE("device comm: all-reduce sum, average and max with exact expectations", "[.cuda][comm]") {
  auto be = make_device(world().local_rank());
  DeviceComm dc(*be);
  Communicator& comm = dc.get();
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
    Buffer b = be->memory().alloc(count * dtype_size(dt));
    std::vector<unsigned char> raw(count * dtype_size(dt));
    convert(f.data(), DType::F32, raw.data(), dt, count);
    be->memory().upload(b.data(), raw.data(), raw.size());
    comm.allreduce(BufView{b.data(), count, dt}, ReduceOp::Sum);
    const std::vector<float> got = read(*be, b.tensor(dt, 1, count));
    const int ranks_sum = n * (n + 1) / 2;
    for (size_t i = 0; i < count; i += 997) REQUIRE(got[i] == float(ranks_sum * int(i % 7 + 1)));
    be->memory().upload(b.data(), raw.data(), raw.size());
    comm.allreduce(BufView{b.data(), count, dt}, ReduceOp::Max);
    const std::vector<float> mx = read(*be, b.tensor(dt, 1, count));
    for (size_t i = 0; i < count; i += 997) REQUIRE(mx[i] == float(n * int(i % 7 + 1)));
  }
  Buffer kb = be->memory().alloc(count * 4);
  be->memory().upload(kb.data(), k.data(), count * 4);
  comm.allreduce(BufView{kb.data(), count, DType::I32}, ReduceOp::Sum);
  std::vector<int32_t> ks(count);
  be->memory().download(ks.data(), kb.data(), count * 4);
  for (size_t i = 0; i < count; ++i) REQUIRE(ks[i] == (n * (n + 1) / 2) * int(i % 11) - 5 * n);
  // Average of f32: (sum of 1..n) / n.
  std::vector<float> one(8, float(r + 1));
  Buffer ab = be->memory().alloc(8 * 4);
  be->memory().upload(ab.data(), one.data(), 32);
  comm.allreduce(BufView{ab.data(), 8, DType::F32}, ReduceOp::Avg);
  CHECK(read(*be, ab.tensor(DType::F32, 1, 8))[3] == Approx(float(n + 1) / 2.0f));
  CHECK_THROWS(comm.allreduce(BufView{kb.data(), 4, DType::I32}, ReduceOp::Avg));
}

TEST_CASE("device comm: non-blocking all-reduces are ordered after earlier compute and before later compute",
          "[.cuda][comm]") {
  auto be = make_device(world().local_rank());
  DeviceComm dc(*be);
  Communicator& comm = dc.get();
  const size_t count = 1 << 20;
  Buffer src = be->memory().alloc(count * 4), b1 = be->memory().alloc(count * 2), b2 = be->memory().alloc(count * 2);
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = float(i % 5 + 1);
  be->memory().upload(src.data(), v.data(), count * 4);
  // Compute writes the buffers (cast), the collectives must see those values...
  be->ops().cast(src.data(), DType::F32, b1.data(), DType::F16, count);
  auto r1 = comm.iallreduce(BufView{b1.data(), count, DType::F16}, ReduceOp::Sum);
  be->ops().cast(src.data(), DType::F32, b2.data(), DType::BF16, count);
  auto r2 = comm.iallreduce(BufView{b2.data(), count, DType::BF16}, ReduceOp::Sum);
  r1->wait();
  r2->wait();
  // ...and compute after wait() must see the reduced values.
  Buffer out = be->memory().alloc(count * 4);
  be->ops().cast(b1.data(), DType::F16, out.data(), DType::F32, count);
  const std::vector<float> got = read(*be, out.tensor(DType::F32, 1, count));
  const float n = float(comm.size());
  for (size_t i = 0; i < count; i += 4099) REQUIRE(got[i] == n * float(i % 5 + 1));
  be->memory().synchronize();
  CHECK(r1->test());
  CHECK(r2->seconds() >= 0.0);
}

TEST_CASE("device comm: broadcast, all-gather and barrier", "[.cuda][comm]") {
  auto be = make_device(world().local_rank());
  DeviceComm dc(*be);
  Communicator& comm = dc.get();
  const int n = comm.size(), r = comm.rank();
  std::vector<int32_t> v(1000, r == 0 ? 42 : -1);
  Buffer b = be->memory().alloc(v.size() * 4);
  be->memory().upload(b.data(), v.data(), v.size() * 4);
  comm.broadcast(BufView{b.data(), v.size(), DType::I32}, 0);
  std::vector<int32_t> got(v.size());
  be->memory().download(got.data(), b.data(), got.size() * 4);
  CHECK(got == std::vector<int32_t>(v.size(), 42));
  const int32_t mine[2] = {r, 10 * r};
  Buffer s = be->memory().alloc(8), all = be->memory().alloc(size_t(n) * 8);
  be->memory().upload(s.data(), mine, 8);
  comm.allgather(s.data(), all.data(), 8);
  std::vector<int32_t> g(size_t(n) * 2);
  be->memory().download(g.data(), all.data(), g.size() * 4);
  for (int q = 0; q < n; ++q) CHECK((g[size_t(q) * 2] == q && g[size_t(q) * 2 + 1] == 10 * q));
  comm.barrier();
}

TEST_CASE("device comm: reduce-scatter of FP16 blocks and the in-place all-gather (ZeRO stage 1), exact",
          "[.cuda][comm]") {
  auto be = make_device(world().local_rank());
  DeviceComm dc(*be);
  Communicator& comm = dc.get();
  const int n = comm.size(), r = comm.rank();
  const size_t block = 96;  // small integers: every sum exact in FP16
  std::vector<float> send(size_t(n) * block);
  for (size_t i = 0; i < send.size(); ++i) send[i] = float((i % 7) + r);
  std::vector<uint16_t> h(send.size());
  convert(send.data(), DType::F32, h.data(), DType::F16, send.size());
  Buffer s = be->memory().alloc(h.size() * 2), recv = be->memory().alloc(block * 2);
  be->memory().upload(s.data(), h.data(), h.size() * 2);
  comm.reduce_scatter(s.data(), BufView{recv.data(), block, DType::F16}, ReduceOp::Sum);
  std::vector<uint16_t> got16(block);
  be->memory().download(got16.data(), recv.data(), block * 2);
  std::vector<float> got(block);
  convert(got16.data(), DType::F16, got.data(), DType::F32, block);
  for (size_t i = 0; i < block; ++i) {
    const size_t at = size_t(r) * block + i;
    CHECK(got[i] == float(n) * float(at % 7) + float(n * (n - 1) / 2));
  }
  // In place: each rank writes its block, the all-gather fills the others.
  std::vector<int32_t> all(size_t(n) * block, -1);
  for (size_t i = 0; i < block; ++i) all[size_t(r) * block + i] = int32_t(1000 * r + int(i));
  Buffer a = be->memory().alloc(all.size() * 4);
  be->memory().upload(a.data(), all.data(), all.size() * 4);
  comm.allgather_in_place(BufView{a.data(), all.size(), DType::I32});
  be->memory().download(all.data(), a.data(), all.size() * 4);
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < block; ++i) CHECK(all[size_t(q) * block + i] == int32_t(1000 * q + int(i)));
}

TEST_CASE("device comm: the non-blocking in-place all-gather, waited for by the compute stream, and compute "
          "enqueued before it read first", "[.cuda][comm]") {
  auto be = make_device(world().local_rank());
  DeviceComm dc(*be);
  Communicator& comm = dc.get();
  const int n = comm.size(), r = comm.rank();
  const size_t block = 4096;
  std::vector<float> all(size_t(n) * block, -1.0f), mine(block);
  for (size_t i = 0; i < block; ++i) mine[i] = float(1000 * r + int(i % 1000));
  Buffer a = be->memory().alloc(all.size() * 4), src = be->memory().alloc(block * 4),
         copy = be->memory().alloc(all.size() * 4);
  be->memory().upload(a.data(), all.data(), all.size() * 4);
  be->memory().upload(src.data(), mine.data(), block * 4);
  // This rank's block written by compute enqueued just before: the all-gather must send it.
  be->ops().cast(src.data(), DType::F32, static_cast<float*>(a.data()) + size_t(r) * block, DType::F32, block);
  auto req = comm.iallgather_in_place(BufView{a.data(), all.size(), DType::F32});
  req->wait();  // the compute stream waits; what follows reads the gathered buffer
  be->ops().cast(a.data(), DType::F32, copy.data(), DType::F32, all.size());
  be->memory().download(all.data(), copy.data(), all.size() * 4);
  size_t wrong = 0;
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < block; ++i) wrong += all[size_t(q) * block + i] != float(1000 * q + int(i % 1000));
  CHECK(wrong == 0);
}

TEST_CASE("device comm: an all-reduce inside a captured step replays", "[.cuda][comm]") {
  auto be = make_device(world().local_rank());
  const size_t count = 4096;
  Buffer src = be->memory().alloc(count * 4), buf = be->memory().alloc(count * 4);
  bool graph = false;
  {
    DeviceComm dc(*be);
    Communicator& comm = dc.get();
    std::vector<float> v(count, float(comm.rank() + 1));
    be->memory().upload(src.data(), v.data(), count * 4);
    auto step = [&] {
      be->ops().cast(src.data(), DType::F32, buf.data(), DType::F32, count);  // reset the buffer on the stream
      auto req = comm.iallreduce(BufView{buf.data(), count, DType::F32}, ReduceOp::Sum);
      req->wait();
    };
    step();  // eager warm-up
    CapturedStep captured(*be, step);
    graph = captured.is_graph();
    REQUIRE(graph == device_is_gpu());
    const float want = float(comm.size() * (comm.size() + 1) / 2);
    for (int i = 0; i < 3; ++i) {
      captured.replay();
      CHECK(read(*be, buf.tensor(DType::F32, 1, count))[count - 1] == want);
    }
    // The communicator goes first, as in the trainer: NCCL waits for graphs holding its collectives
    // to be destroyed, so it drops the backend's graph (else this would hang with several ranks).
  }
  if (graph) CHECK_THROWS_WITH(be->capture().replay(), Catch::Contains("replay without a captured graph"));
}

TEST_CASE("device comm: check_async_errors on a healthy communicator does not throw", "[.cuda][comm]") {
  auto be = make_device(world().local_rank());
  const size_t count = 1 << 16;
  Buffer buf = be->memory().alloc(count * 2);
  {
    DeviceComm dc(*be);
    Communicator& comm = dc.get();
    CHECK_NOTHROW(comm.check_async_errors());
    comm.allreduce(BufView{buf.data(), count, DType::F16}, ReduceOp::Sum);
    CHECK_NOTHROW(comm.check_async_errors());  // right after enqueueing: may still run
    be->memory().synchronize();                         // polls the same check while it waits
    CHECK_NOTHROW(comm.check_async_errors());
    // Inside and after a captured step, as the trainer calls it at the start of every step.
    auto step = [&] { comm.iallreduce(BufView{buf.data(), count, DType::F16}, ReduceOp::Sum)->wait(); };
    step();
    CapturedStep captured(*be, step);
    for (int i = 0; i < 3; ++i) {
      CHECK_NOTHROW(comm.check_async_errors());
      captured.replay();
    }
    be->memory().synchronize();
    CHECK_NOTHROW(comm.check_async_errors());
    comm.barrier();
  }
  be->memory().synchronize();  // the communicator took its check off the backend's waits when it went
}

