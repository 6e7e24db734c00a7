// NCCL only (amp_gpu_tests built with NCCL): the step clock that times collectives of eager steps
// and of graph launches, and the gradient reducer's measurements on it.
#include "comm/nccl/nccl_communicator.h"
#include "device_env.h"

using namespace amp;
using namespace gpu_test;

namespace {

std::unique_ptr<Backend> rank_backend() { return make_device(world().local_rank()); }

// The CUDA backend owns the compute stream NCCL orders its collectives with.
DeviceStream& stream_of(Backend& be) {
  auto* s = dynamic_cast<DeviceStream*>(&be);
  REQUIRE(s != nullptr);
  return *s;
}

}  // namespace

TEST_CASE("nccl: the step clock reads eager steps and each completed graph launch once", "[.cuda][nccl]") {
  auto be = rank_backend();
  const size_t count = size_t(8) << 20;  // 16 MiB of f16: the collective takes measurable time
  Buffer src = be->memory().alloc(count * 4), buf = be->memory().alloc(count * 2);
  {
    NcclCommunicator comm(world(), stream_of(*be));
    StepClock& clock = comm;
    double c = -1, e = -1;
    CHECK_FALSE(clock.clock_poll(&c, &e));  // nothing measured yet
    auto step = [&] {
      clock.clock_begin_step();
      be->ops().cast(src.data(), DType::F32, buf.data(), DType::F16, count);  // compute before the collective
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
    be->memory().synchronize();
    REQUIRE(clock.clock_poll(&c, &e));  // the later of the two
    check_times();
    CHECK_FALSE(clock.clock_poll(&c, &e));  // read once
    REQUIRE(be->capture().begin_capture());
    step();
    CHECK_FALSE(clock.clock_poll(&c, &e));  // never during a capture
    be->capture().end_capture();
    CHECK_FALSE(clock.clock_poll(&c, &e));  // captured, not launched yet
    be->capture().replay();
    be->memory().synchronize();
    REQUIRE(clock.clock_poll(&c, &e));
    check_times();
    CHECK_FALSE(clock.clock_poll(&c, &e));  // the same launch is not read twice
    be->capture().replay();
    be->capture().replay();
    be->memory().synchronize();
    REQUIRE(clock.clock_poll(&c, &e));  // the latest launch; the one before it is lost
    check_times();
    CHECK_FALSE(clock.clock_poll(&c, &e));
    // An eager step after the graph's launches is read too.
    step();
    be->memory().synchronize();
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
  Buffer grads = be->memory().alloc(total * 2), flags = be->memory().alloc(64);
  NcclCommunicator comm(world(), stream_of(*be));
  int32_t* my_flag = flags.as<int32_t>() + OverflowFlags::rank_slot(comm.rank());
  GradReducer red(comm, spans, total, DType::F16, grads.data(), 1 << 20, 1 << 20, [&](size_t begin, size_t end) {
    be->amp_kernels().find_nonfinite(grads.data(), DType::F16, spans, begin, end, my_flag);
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
      REQUIRE(be->capture().begin_capture());
      step();
      be->capture().end_capture();
      be->capture().replay();
    } else {
      be->capture().replay();
    }
    be->memory().synchronize();  // as at a log step: the step's events have completed before the next one
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
