// amp::MixedPrecision, the owner of the loss scale and the overflow flags, on the CPU backend: the
// verbs of a step in order on random gradients (unscale, flags, norm², the scale's moves), the
// pre-reduction check into this rank's slot, the agreement through a Communicator, the norm verdict,
// the skip report's attribution and the divergence check.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "amp/mixed_precision.h"
#include "backend/cpu/cpu_backend.h"
#include "core/convert.h"
#include "core/error.h"
#include "core/half.h"
#include "core/rng.h"
#include "train/working_weights.h"

using namespace amp;

namespace {

// A communicator of `size` ranks whose MAX all-reduce takes the other ranks' flags from a table:
// what this rank would receive from a real all-reduce.
class TableComm final : public Communicator {
 public:
  TableComm(int rank, std::vector<std::vector<int32_t>> others) : rank_(rank), others_(std::move(others)) {}
  std::string name() const override { return "table"; }
  int rank() const override { return rank_; }
  int size() const override { return int(others_.size()) + 1; }
  int local_rank() const override { return rank_; }
  int local_size() const override { return size(); }
  void allreduce(BufView buf, ReduceOp op) override {
    REQUIRE(op == ReduceOp::Max);
    REQUIRE(buf.dtype == DType::I32);
    ++calls;
    auto* v = static_cast<int32_t*>(buf.data);
    for (const auto& o : others_)
      for (size_t i = 0; i < buf.count; ++i) v[i] = std::max(v[i], o[i]);
  }
  std::unique_ptr<Request> iallreduce(BufView, ReduceOp) override { return nullptr; }
  void broadcast(BufView, int) override {}
  void allgather(const void*, void*, size_t) override {}
  void barrier() override {}
  [[noreturn]] void abort(int) override { throw std::runtime_error("abort"); }
  int calls = 0;

 private:
  int rank_;
  std::vector<std::vector<int32_t>> others_;
};

std::vector<float> randn(size_t n, uint64_t seed) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(r.normal()) + 1e-3f;
  return v;
}

struct Rig {
  CpuBackend be{1};
  std::vector<TensorSpan> spans{{0, 1000}, {1024, 300}, {1344, 77}};
  size_t total = 1421;
  std::vector<std::string> names{"fc1.weight", "fc1.bias", "fc2.weight"};
  Buffer g16 = be.memory().alloc(total * 2), g32 = be.memory().alloc(total * 4);
  void fill(DType t, const std::vector<float>& v) { convert(v.data(), DType::F32, g16.data(), t, v.size()); }
};

}  // namespace

TEST_CASE("mixed precision: one clean step unscales exactly, sums the norm and grows the scale on time",
          "[amp]") {
  Rig r;
  ScalerParams p;
  p.init_scale = 1024.0f;
  p.growth_interval = 2;
  MixedPrecision amp(r.be.memory(), r.be.amp_kernels(), p, DType::F16, r.spans, r.names, 0, 1);
  std::vector<float> g = randn(r.total, 5);
  for (auto& x : g) x *= 1024.0f;  // scaled gradients
  r.fill(DType::F16, g);
  for (int step = 1; step <= 2; ++step) {
    amp.begin_step();
    CHECK(*amp.scale() == 1024.0f);
    amp.unscale_and_check(r.g16.data());
    amp.agree(nullptr);
    amp.check_norm(1.0f);
    const AmpVerdict v = amp.verdict();
    CHECK(v.flags[OverflowFlags::kAny] == 0);
    amp.unscale(r.g16.data(), r.total, r.g32.as<float>());  // as the optimizer does, chunk by chunk
    double norm = 0;
    for (const TensorSpan& s : r.spans)
      for (size_t i = s.offset; i < s.offset + s.count; ++i) {
        const double want = double(r.g16.as<Half>()[i].to_float()) / 1024.0;
        REQUIRE(double(r.g32.as<float>()[i]) == want);  // exact: a division by a power of two
        norm += want * want;
      }
    CHECK(double(*v.norm_sq) == Approx(norm).epsilon(1e-5));
    amp.update();
  }
  const AmpScalars s = amp.read();
  CHECK(s.scaler.scale == 2048.0f);  // grown after growth_interval clean steps
  CHECK(s.scaler.optimizer_steps == 2);
  CHECK(s.scaler.overflow_steps == 0);
}

TEST_CASE("mixed precision: a non-finite gradient on another rank skips here, attributed to its rank and tensor",
          "[amp]") {
  Rig r;
  ScalerParams p;
  p.init_scale = 65536.0f;
  MixedPrecision amp(r.be.memory(), r.be.amp_kernels(), p, DType::BF16, r.spans, r.names, 0, 3);
  r.fill(DType::BF16, randn(r.total, 6));
  // Rank 2 saw a NaN in tensor 2 (fc2.weight) before the reduction; rank 1 nothing.
  std::vector<int32_t> rank1(OverflowFlags::count(3), 0), rank2(OverflowFlags::count(3), 0);
  rank2[OverflowFlags::kAny] = 1;
  rank2[OverflowFlags::kReduced] = 3;
  rank2[size_t(OverflowFlags::rank_slot(2))] = 3;
  TableComm comm(0, {rank1, rank2});
  const ScalerState before = amp.read().scaler;
  amp.begin_step();
  amp.check_bucket(r.g16.data(), 0, r.total);  // this rank's buckets are clean
  amp.unscale_and_check(r.g16.data());
  amp.agree(&comm);
  CHECK(comm.calls == 1);  // one MAX all-reduce carries the decision and its attribution
  const std::vector<int32_t> f = amp.read_flags();
  CHECK(f[OverflowFlags::kAny] == 1);
  CHECK(f[size_t(OverflowFlags::rank_slot(0))] == 0);
  amp.check_norm(0.0f);
  amp.update();
  const ScalerState now = amp.read().scaler;
  CHECK(now.scale == 32768.0f);  // backed off
  CHECK(now.overflow_steps == 1);
  CHECK(now.optimizer_steps == 0);
  CHECK(now.last_overflow_rank == 2);
  CHECK(amp.overflow_where(now) == "fc2.weight on rank 2");
  CHECK(amp.skip_report(before, now) ==
        "step 1: non-finite gradients in fc2.weight on rank 2 | step skipped on every rank | scale 65536 -> 32768");
}

TEST_CASE("mixed precision: the pre-reduction check writes this rank's slot with the first bad tensor", "[amp]") {
  Rig r;
  MixedPrecision amp(r.be.memory(), r.be.amp_kernels(), ScalerParams{}, DType::F16, r.spans, r.names, 1, 2);
  std::vector<float> g = randn(r.total, 7);
  g[1100] = std::numeric_limits<float>::infinity();  // tensor 1 (fc1.bias)
  r.fill(DType::F16, g);
  amp.begin_step();
  amp.check_bucket(r.g16.data(), 1344, r.total);  // a clean bucket
  CHECK(amp.read_flags()[size_t(OverflowFlags::rank_slot(1))] == 0);
  amp.check_bucket(r.g16.data(), 0, 1344);
  const std::vector<int32_t> f = amp.read_flags();
  CHECK(f[size_t(OverflowFlags::rank_slot(1))] == 2);  // 1 + tensor index
  CHECK(f[size_t(OverflowFlags::rank_slot(0))] == 0);
}

TEST_CASE("mixed precision: a non-finite norm skips only with clipping on, named as the norm", "[amp]") {
  Rig r;
  ScalerParams p;
  p.mode = ScaleMode::None;
  MixedPrecision amp(r.be.memory(), r.be.amp_kernels(), p, DType::F32, r.spans, r.names, 0, 1);
  std::vector<float> g(r.total, 3e19f);  // finite, but the sum of squares overflows FP32
  Buffer g_in = r.be.memory().alloc(r.total * 4);
  std::memcpy(g_in.data(), g.data(), r.total * 4);
  for (float clip : {0.0f, 1.0f}) {
    amp.begin_step();
    amp.unscale_and_check(g_in.data());
    amp.agree(nullptr);
    amp.check_norm(clip);
    const AmpVerdict v = amp.verdict();
    CHECK(std::isinf(*v.norm_sq));
    CHECK(v.flags[OverflowFlags::kAny] == (clip > 0 ? 1 : 0));
    if (clip > 0) CHECK(v.flags[OverflowFlags::kReduced] == OverflowFlags::kNormOverflow);
    amp.update();
  }
  CHECK(amp.overflow_where(amp.read().scaler).rfind("the global gradient norm", 0) == 0);
}

TEST_CASE("mixed precision: overflows at the minimum scale end the run as divergence", "[amp]") {
  Rig r;
  ScalerParams p;
  p.init_scale = 1.0f;
  p.min_scale = 1.0f;
  MixedPrecision amp(r.be.memory(), r.be.amp_kernels(), p, DType::F16, r.spans, r.names, 0, 1);
  std::vector<float> g = randn(r.total, 8);
  g[3] = std::numeric_limits<float>::quiet_NaN();
  r.fill(DType::F16, g);
  for (int step = 0; step < 3; ++step) {
    amp.begin_step();
    amp.unscale_and_check(r.g16.data());
    amp.agree(nullptr);
    amp.check_norm(0.0f);
    amp.update();
  }
  const ScalerState s = amp.read().scaler;
  CHECK(s.overflow_at_min == 3);
  CHECK_NOTHROW(amp.check_divergence(s, 4));
  try {
    amp.check_divergence(s, 3);
    FAIL("no divergence error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Divergence);
    CHECK(std::string(e.what()).find("fc1.weight") != std::string::npos);
  }
}

TEST_CASE("mixed precision: a step's calls out of order are refused, naming the call and where the step stood",
          "[amp]") {
  Rig r;
  MixedPrecision amp(r.be.memory(), r.be.amp_kernels(), ScalerParams{}, DType::F16, r.spans, r.names, 0, 1);
  r.fill(DType::F16, randn(r.total, 9));
  auto refused = [](const std::function<void()>& call, const std::string& verb, const std::string& where) {
    try {
      call();
      FAIL("accepted: " << verb);
    } catch (const Error& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(e.kind() == ErrorKind::Internal);
      CHECK(what.find(verb + " called " + where) != std::string::npos);
    }
  };
  // Before begin_step nothing but begin_step (and load) is allowed.
  refused([&] { amp.unscale_and_check(r.g16.data()); }, "unscale_and_check()",
          "before begin_step()");
  refused([&] { amp.update(); }, "update()", "before begin_step()");
  amp.begin_step();
  amp.check_bucket(r.g16.data(), 0, r.total);
  refused([&] { amp.check_norm(1.0f); }, "check_norm()", "after begin_step()");  // the agreement skipped
  refused([&] { amp.begin_step(); }, "begin_step()", "after begin_step()");
  amp.unscale_and_check(r.g16.data());
  refused([&] { amp.check_bucket(r.g16.data(), 0, r.total); }, "check_bucket()", "after unscale_and_check()");
  refused([&] { (void)amp.verdict(); }, "verdict()", "after unscale_and_check()");  // the norm not checked
  amp.agree(nullptr);
  refused([&] { amp.update(); }, "update()", "after agree()");
  refused([&] { amp.load(amp.initial_state()); }, "load()", "after agree()");
  amp.check_norm(1.0f);
  CHECK(amp.verdict().flags[OverflowFlags::kAny] == 0);
  amp.update();
  refused([&] { (void)amp.verdict(); }, "verdict()", "before begin_step()");  // a stale verdict
  // The refusals changed nothing: a whole step still runs and counts once.
  amp.begin_step();
  amp.unscale_and_check(r.g16.data());
  amp.agree(nullptr);
  amp.check_norm(0.0f);
  amp.update();
  CHECK(amp.read().scaler.optimizer_steps == 2);
}

TEST_CASE("mixed precision: the optimizer's unscale gives the fused pass's values, bit for bit", "[amp]") {
  CpuBackend be(2);
  AmpKernels& k = be.amp_kernels();
  const size_t n = 70001;  // not a multiple of any block
  for (DType t : {DType::F16, DType::BF16, DType::F32}) {
    INFO(dtype_name(t));
    std::vector<float> v = randn(n, 11);
    for (size_t i = 0; i < n; ++i) v[i] *= std::ldexp(1.0f, int(i % 40) - 20);  // tiny to large
    v[17] = std::numeric_limits<float>::infinity();
    v[4242] = std::numeric_limits<float>::quiet_NaN();
    Buffer g = be.memory().alloc(n * dtype_size(t)), fused = be.memory().alloc(n * 4), again = be.memory().alloc(n * 4);
    convert(v.data(), DType::F32, g.data(), t, n);
    std::vector<int32_t> flags(OverflowFlags::count(1), 0);
    float norm = 0;
    for (float scale : {1.0f, 1024.0f, 3.0f, 65536.0f * 65536.0f}) {
      k.unscale_check(g.data(), t, {{0, n}}, &scale, fused.as<float>(), flags.data(), &norm);
      k.unscale(g.data(), t, n, &scale, again.as<float>());
      CHECK(std::memcmp(fused.data(), again.data(), n * 4) == 0);
      k.unscale(g.data(), t, 1000, &scale, again.as<float>());  // a prefix: the same values
      CHECK(std::memcmp(fused.data(), again.data(), 1000 * 4) == 0);
    }
  }
}

TEST_CASE("mixed precision: FP8 amaxes ride the flags' all-reduce, every rank sets the same scales, a skip records none",
          "[amp][fp8]") {
  Rig r;
  ScalerParams p;
  p.mode = ScaleMode::None;
  const int world = 2;
  MixedPrecision amp(r.be.memory(), r.be.amp_kernels(), p, DType::BF16, r.spans, r.names, 0, world);
  Fp8Params fp;
  fp.history = 4;
  amp.enable_fp8(fp, {{"fc1.input", Fp8::E4M3}, {"fc1.grad_output", Fp8::E5M2}});
  const Fp8Binding b = amp.fp8_binding();
  const size_t words = OverflowFlags::count(world) + 2;
  r.fill(DType::BF16, randn(r.total, 7));
  const auto step = [&](float mine0, float mine1, std::vector<int32_t> theirs) {
    amp.begin_step();
    // The casts of this rank's step MAX their amaxes into the words after the flags.
    b.amax[0] = std::max(b.amax[0], amax_bits(mine0));
    b.amax[1] = std::max(b.amax[1], amax_bits(mine1));
    amp.unscale_and_check(r.g16.data());
    TableComm comm(0, {std::move(theirs)});
    amp.agree(&comm);
    CHECK(comm.calls == 1);  // still one all-reduce per step
    amp.check_norm(0.0f);
    amp.update();
  };
  std::vector<int32_t> other(words, 0);
  other[OverflowFlags::count(world) + 1] = amax_bits(3e-5f);  // the other rank's larger gradient amax
  step(2.0f, 1e-6f, other);
  const std::vector<int32_t> f = amp.read_flags();
  REQUIRE(f.size() == words);
  CHECK(amax_from_bits(f[OverflowFlags::count(world)]) == 2.0f);
  CHECK(amax_from_bits(f[OverflowFlags::count(world) + 1]) == 3e-5f);
  Fp8State::Host h = amp.fp8()->read();
  CHECK(h.scales[0] == pow2_floor(448.0f / 2.0f));       // 128
  CHECK(h.scales[1] == pow2_floor(57344.0f / 3e-5f));    // from the other rank's amax: the same on both
  CHECK(h.meta.recorded == 1);
  // The next step is skipped (the other rank overflowed): its amaxes are not recorded.
  std::vector<int32_t> overflow(words, 0);
  overflow[OverflowFlags::kAny] = 1;
  overflow[OverflowFlags::count(world)] = amax_bits(1e4f);
  step(1.0f, 1e-6f, overflow);
  const Fp8State::Host after = amp.fp8()->read();
  CHECK(after.scales == h.scales);
  CHECK(after.history == h.history);
  CHECK(after.meta.recorded == 1);
  // begin_step cleared the words: the third step sees only its own amaxes.
  step(0.5f, 1e-6f, std::vector<int32_t>(words, 0));
  h = amp.fp8()->read();
  CHECK(h.meta.recorded == 2);
  CHECK(h.scales[0] == 128.0f);  // max over the history {2, 0.5}
  CHECK(amp.fp8()->newest_amax(h, 0) == 0.5f);
}

TEST_CASE("working weights outside training: loaded in pieces, the backend's cast of the whole, no FP32 copy kept",
          "[amp]") {
  // What `amp_ddp sample` and `eval` compute with: the masters cast as the optimizer casts its
  // working copy. Values of every magnitude, ties between 16-bit neighbours included, loaded
  // from a reader and in pieces of 7 in reverse order.
  CpuBackend be{1};
  const size_t n = 2003;
  std::vector<float> v = randn(n, 41);
  for (size_t i = 0; i < n; i += 5) v[i] *= std::ldexp(1.0f, int(i % 60) - 30);
  for (size_t i = 3; i < n; i += 11) v[i] = 1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -11) * float(i % 2);  // bf16 and f16 ties
  Buffer master = be.memory().alloc(n * sizeof(float));
  be.memory().upload(master.data(), v.data(), n * sizeof(float));
  for (DType compute : {DType::F32, DType::F16, DType::BF16}) {
    INFO(dtype_name(compute));
    const size_t bytes = n * dtype_size(compute);
    Buffer want = be.memory().alloc(bytes);
    be.ops().cast(master.data(), DType::F32, want.data(), compute, n);
    struct HostPieces : WeightPieces {  // sample's path: a reader's pieces, then its finish()
      const float* values;
      bool finished = false;
      explicit HostPieces(const float* p) : values(p) {}
      const float* next(size_t begin, size_t) override { return values + begin; }
      void finish() override { finished = true; }
    } reader(v.data());
    const WorkingWeights whole(be, reader, n, compute);
    CHECK(reader.finished);
    WorkingWeights pieces(be, n, compute);
    for (size_t end = n; end > 0;) {
      const size_t begin = end > 7 ? end - 7 : 0;
      pieces.load(begin, v.data() + begin, end - begin);
      end = begin;
    }
    CHECK(std::memcmp(whole.params(), want.data(), bytes) == 0);
    CHECK(std::memcmp(pieces.params(), want.data(), bytes) == 0);
    CHECK_THROWS_WITH(pieces.load(n - 3, v.data(), 4), Catch::Contains("WorkingWeights::load: elements [2000, 2004) of 2003"));
  }
}
