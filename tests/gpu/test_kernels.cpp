// Each elementwise, loss and mixed-precision kernel against its CPU twin on the same seeded data
// (never zeros), per dtype: activations, softmax cross-entropy, MSE, find_nonfinite,
// unscale_check, grad_stats, the optimizers (and their skip) and update_scale on a scripted
// overflow sequence.
#include <limits>

#include "device_env.h"
#include "model/param_layout.h"

using namespace amp;
using namespace gpu_test;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

// A few floats in backend memory on both sides (loss accumulators, scale, lr, norm).
struct Scalars {
  Buffer c, g;
  Scalars(Backend& cpu, Backend& gpu, const void* init, size_t bytes) {
    c = cpu.memory().alloc(bytes);
    g = gpu.memory().alloc(bytes);
    cpu.memory().upload(c.data(), init, bytes);
    gpu.memory().upload(g.data(), init, bytes);
  }
};

std::vector<TensorSpan> spans_of(const ParamLayout& l) { return l.spans(); }

}  // namespace

TEST_CASE("activations forward and backward match the CPU", "[.cuda][ops]") {
  auto gpu = make_device();
  CpuBackend cpu(2);
  const size_t rows = 37, cols = 129, n = rows * cols;
  std::vector<float> z = randn(n, 11, 3.0), dy = randn(n, 12);
  z[5] = kNaN, z[6] = kInf, z[7] = -kInf, z[8] = 1e-6f, z[9] = -2.5e-7f;
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    for (Activation a : {Activation::Relu, Activation::Gelu}) {
      INFO(dtype_name(dt) << (a == Activation::Relu ? " relu" : " gelu"));
      Mirror Z(cpu, *gpu, z, dt, rows, cols), DY(cpu, *gpu, dy, dt, rows, cols);
      Mirror Y = Mirror::output(cpu, *gpu, dt, rows, cols), DZ = Mirror::output(cpu, *gpu, dt, rows, cols);
      cpu.ops().activation_forward(a, Z.c, Y.c);
      gpu->ops().activation_forward(a, Z.g, Y.g);
      cpu.ops().activation_backward(a, Z.c, DY.c, DZ.c);
      gpu->ops().activation_backward(a, Z.g, DY.g, DZ.g);
      const double rtol = a == Activation::Relu ? 0.0 : 2 * eps_of(dt) + 1e-6;
      const double atol = a == Activation::Relu ? 0.0 : 2e-5;  // erff/expf differ by an ulp near cancellation
      GPU_REQUIRE_CLOSE(read(*gpu, Y.g), read(cpu, Y.c), rtol, atol);
      GPU_REQUIRE_CLOSE(read(*gpu, DZ.g), read(cpu, DZ.c), rtol, atol);
      // In place, as the MLP's backward runs it: dz is dy's memory.
      cpu.ops().activation_backward(a, Z.c, DY.c, DY.c);
      gpu->ops().activation_backward(a, Z.g, DY.g, DY.g);
      GPU_REQUIRE_CLOSE(read(*gpu, DY.g), read(cpu, DY.c), rtol, atol);
    }
  }
}

TEST_CASE("softmax cross-entropy matches the CPU: loss, hits, scaled gradient", "[.cuda][loss]") {
  auto gpu = make_device();
  CpuBackend cpu(2);
  struct Acc {
    float loss_sum;
    int32_t correct;
    float scale;
  };
  // 1000 and 4099 columns take the kernel's vector loops (and their tails) in F16/BF16 and F32.
  for (size_t c : {size_t(10), size_t(13), size_t(1000), size_t(4099)}) {
    for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
      INFO(dtype_name(dt) << " classes " << c);
      const size_t rows = 37;
      std::vector<float> logits = randn(rows * c, 21 + c, 4.0);
      logits[5 * c + 2] = logits[5 * c + 7] = 50.0f;  // a tie: the smaller column wins
      std::vector<int32_t> labels(rows);
      Rng r(5);
      for (auto& y : labels) y = int32_t(r.below(c));
      labels[5] = 2;
      if (c > 1000) {  // ties between lanes (columns 9 and 40: lanes 9 and 8), hits and misses
        logits[6 * c + 9] = logits[6 * c + 40] = 60.0f, labels[6] = 40;        // miss: 9 comes first
        logits[7 * c + 33] = logits[7 * c + 64] = 60.0f, labels[7] = 33;       // hit
        logits[8 * c + c - 1] = 70.0f, labels[8] = int32_t(c - 1);             // hit in the last column
        logits[9 * c + 700] = logits[9 * c + 3000] = 70.0f, labels[9] = 3000;  // miss, far apart
      }
      Mirror L(cpu, *gpu, logits, dt, rows, c), D = Mirror::output(cpu, *gpu, dt, rows, c);
      Scalars lab(cpu, *gpu, labels.data(), rows * sizeof(int32_t));
      const Acc init{1.5f, 3, 1024.0f};
      Scalars acc(cpu, *gpu, &init, sizeof init);
      const float inv = 1.0f / float(rows);
      auto* ca = acc.c.as<Acc>();
      auto* ga = acc.g.as<Acc>();
      cpu.ops().softmax_xent(dense_xent_args(L.c, lab.c.as<int32_t>(), &ca->scale, inv, D.c, &ca->loss_sum, &ca->correct));
      gpu->ops().softmax_xent(dense_xent_args(L.g, lab.g.as<int32_t>(), &ga->scale, inv, D.g, &ga->loss_sum, &ga->correct));
      GPU_REQUIRE_CLOSE(read(*gpu, D.g), read(cpu, D.c), 2 * eps_of(dt) + 1e-6, 1e-6);
      GPU_REQUIRE_CLOSE(read(*gpu, D.g), read(cpu, D.c), 0.0, 0.0);  // one specification, the same lanes: equal
      // Evaluation form: no gradient, accumulate again.
      const Tensor none_c{nullptr, dt, rows, c}, none_g{nullptr, dt, rows, c};
      cpu.ops().softmax_xent(dense_xent_args(L.c, lab.c.as<int32_t>(), &ca->scale, 1.0f, none_c, &ca->loss_sum, &ca->correct));
      gpu->ops().softmax_xent(dense_xent_args(L.g, lab.g.as<int32_t>(), &ga->scale, 1.0f, none_g, &ga->loss_sum, &ga->correct));
      const Acc want = read_one<Acc>(cpu, acc.c.data()), got = read_one<Acc>(*gpu, acc.g.data());
      CHECK(got.correct == want.correct);
      CHECK(got.loss_sum == Approx(want.loss_sum).epsilon(1e-6));
    }
  }
}

TEST_CASE("softmax cross-entropy over padded rows (a padded vocabulary) matches the CPU, padding untouched",
          "[.cuda][loss]") {
  auto gpu = make_device();
  CpuBackend cpu(2);
  const size_t rows = 29, c = 300, ld = 384;  // GPT-2's 50257 -> 50304 in small
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    INFO(dtype_name(dt));
    std::vector<float> logits = randn(rows * ld, 91, 3.0);
    for (size_t r = 0; r < rows; ++r)
      for (size_t j = c; j < ld; ++j) logits[r * ld + j] = kNaN;  // never read: a NaN would show
    std::vector<int32_t> labels(rows);
    for (size_t r = 0; r < rows; ++r) labels[r] = int32_t((r * 53) % c);
    Mirror L(cpu, *gpu, logits, dt, rows, ld), D(cpu, *gpu, std::vector<float>(rows * ld, kNaN), dt, rows, ld);
    Scalars lab(cpu, *gpu, labels.data(), rows * sizeof(int32_t));
    struct Acc {
      float loss_sum;
      int32_t correct;
      float scale;
    } init{0.0f, 0, 4096.0f};
    Scalars acc(cpu, *gpu, &init, sizeof init);
    for (int side = 0; side < 2; ++side) {
      Backend& be = side ? *gpu : static_cast<Backend&>(cpu);
      Acc* a = (side ? acc.g : acc.c).as<Acc>();
      SoftmaxXentArgs x;
      x.logits = (side ? L.g : L.c).data, x.logits_type = dt, x.rows = int64_t(rows), x.classes = int64_t(c);
      x.ld_logits = int64_t(ld), x.labels = (side ? lab.g : lab.c).as<int32_t>(), x.scale = &a->scale;
      x.inv_count = 1.0f / float(rows), x.dlogits = (side ? D.g : D.c).data, x.dlogits_type = dt;
      x.ld_dlogits = int64_t(ld), x.loss_sum = &a->loss_sum, x.correct = &a->correct;
      be.ops().softmax_xent(x);
    }
    const std::vector<float> dg = read(*gpu, D.g), dc = read(cpu, D.c);
    GPU_REQUIRE_CLOSE(dg, dc, 2 * eps_of(dt) + 1e-6, 1e-6);  // NaN must meet NaN: the padding on both
    GPU_REQUIRE_CLOSE(dg, dc, 0.0, 0.0);  // equal
    size_t padding_written = 0;
    for (size_t r = 0; r < rows; ++r)
      for (size_t j = c; j < ld; ++j) padding_written += !std::isnan(dg[r * ld + j]);
    CHECK(padding_written == 0);
    const Acc want = read_one<Acc>(cpu, acc.c.data()), got = read_one<Acc>(*gpu, acc.g.data());
    CHECK(std::isfinite(want.loss_sum));
    CHECK(got.correct == want.correct);
    CHECK(got.loss_sum == Approx(want.loss_sum).epsilon(1e-6));
  }
}

TEST_CASE("softmax cross-entropy: NaN logits give the CPU's arg-max and NaN gradients", "[.cuda][loss]") {
  auto gpu = make_device();
  CpuBackend cpu(2);
  const size_t rows = 8, c = 10;
  std::vector<float> logits = randn(rows * c, 3, 2.0);
  logits[1 * c + 0] = kNaN;  // column 0 NaN: arg-max 0
  logits[2 * c + 4] = kNaN;  // elsewhere: ignored by the arg-max
  std::vector<int32_t> labels{0, 0, 1, 2, 3, 4, 5, 6};
  Mirror L(cpu, *gpu, logits, DType::F16, rows, c), D = Mirror::output(cpu, *gpu, DType::F16, rows, c);
  Scalars lab(cpu, *gpu, labels.data(), rows * sizeof(int32_t));
  struct Acc {
    float loss_sum;
    int32_t correct;
    float scale;
  } init{0.0f, 0, 1.0f};
  Scalars acc(cpu, *gpu, &init, sizeof init);
  cpu.ops().softmax_xent(dense_xent_args(L.c, lab.c.as<int32_t>(), &acc.c.as<Acc>()->scale, 0.125f, D.c, &acc.c.as<Acc>()->loss_sum,
                   &acc.c.as<Acc>()->correct));
  gpu->ops().softmax_xent(dense_xent_args(L.g, lab.g.as<int32_t>(), &acc.g.as<Acc>()->scale, 0.125f, D.g, &acc.g.as<Acc>()->loss_sum,
                    &acc.g.as<Acc>()->correct));
  CHECK(read_one<Acc>(*gpu, acc.g.data()).correct == read_one<Acc>(cpu, acc.c.data()).correct);
  GPU_REQUIRE_CLOSE(read(*gpu, D.g), read(cpu, D.c), 2 * eps_of(DType::F16), 1e-6);
}

TEST_CASE("mse matches the CPU", "[.cuda][loss]") {
  auto gpu = make_device();
  CpuBackend cpu(2);
  for (size_t rows : {size_t(37), size_t(300000)}) {
    for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
      INFO(dtype_name(dt) << " rows " << rows);
      const size_t cols = 3;
      const std::vector<float> pred = randn(rows * cols, 31), target = randn(rows * cols, 32);
      Mirror P(cpu, *gpu, pred, dt, rows, cols), T(cpu, *gpu, target, DType::F32, rows, cols);
      Mirror D = Mirror::output(cpu, *gpu, dt, rows, cols);
      struct Acc {
        float loss_sum, scale;
      } init{2.25f, 512.0f};
      Scalars acc(cpu, *gpu, &init, sizeof init);
      const float inv = 1.0f / float(rows * cols);
      cpu.ops().mse(P.c, T.c, &acc.c.as<Acc>()->scale, inv, D.c, &acc.c.as<Acc>()->loss_sum);
      gpu->ops().mse(P.g, T.g, &acc.g.as<Acc>()->scale, inv, D.g, &acc.g.as<Acc>()->loss_sum);
      GPU_REQUIRE_CLOSE(read(*gpu, D.g), read(cpu, D.c), 0.0, 0.0);  // one product, rounded alike
      const Tensor none_c{nullptr, dt, rows, cols}, none_g{nullptr, dt, rows, cols};
      cpu.ops().mse(P.c, T.c, &acc.c.as<Acc>()->scale, 1.0f, none_c, &acc.c.as<Acc>()->loss_sum);
      gpu->ops().mse(P.g, T.g, &acc.g.as<Acc>()->scale, 1.0f, none_g, &acc.g.as<Acc>()->loss_sum);
      CHECK(read_one<Acc>(*gpu, acc.g.data()).loss_sum == Approx(read_one<Acc>(cpu, acc.c.data()).loss_sum).epsilon(1e-6));
    }
  }
}

TEST_CASE("find_nonfinite: first bad tensor within a range, smallest flag kept", "[.cuda][amp]") {
  auto gpu = make_device();
  CpuBackend cpu(1);
  const ParamLayout layout = mlp_layout({13, 37, 3000, 5});  // padding between tensors; fc2.weight spans chunks
  const auto spans = spans_of(layout);
  std::vector<float> g = randn(layout.total, 41, 100.0);
  g[spans[3].offset + 7] = kInf;                       // fc2.bias
  g[spans[4].offset + spans[4].count - 1] = kNaN;      // fc3.weight, last element (a later chunk)
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    Mirror G(cpu, *gpu, g, dt, 1, layout.total);
    const std::pair<size_t, size_t> ranges[] = {{0, layout.total},
                                                {spans[4].offset, layout.total},
                                                {0, spans[3].offset},
                                                {spans[4].offset + 5, spans[4].offset + 4096 * 2 + 3}};
    for (const auto& rg : ranges) {
      for (int32_t init : {0, 2, 9}) {
        INFO(dtype_name(dt) << " range [" << rg.first << ", " << rg.second << ") initial flag " << init);
        Scalars f(cpu, *gpu, &init, sizeof init);
        cpu.amp_kernels().find_nonfinite(G.c.data, dt, spans, rg.first, rg.second, f.c.as<int32_t>());
        gpu->amp_kernels().find_nonfinite(G.g.data, dt, spans, rg.first, rg.second, f.g.as<int32_t>());
        CHECK(read_one<int32_t>(*gpu, f.g.data()) == read_one<int32_t>(cpu, f.c.data()));
      }
    }
  }
}

TEST_CASE("unscale_check: unscaled values bit-exact, flags and squared norm as the CPU", "[.cuda][amp]") {
  auto gpu = make_device();
  CpuBackend cpu(2);
  const ParamLayout layout = mlp_layout({29, 300, 1000, 10});
  const auto spans = spans_of(layout);
  for (bool plant : {false, true}) {
    std::vector<float> g = randn(layout.total, 51, 3000.0);
    if (plant) {
      g[spans[2].offset + 1234] = kInf;
      g[spans[4].offset + 3] = kNaN;
    }
    for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
      for (float scale : {1024.0f, 3.0f}) {
        INFO(dtype_name(dt) << " scale " << scale << (plant ? " with planted inf/nan" : ""));
        Mirror G(cpu, *gpu, g, dt, 1, layout.total);
        Mirror O = Mirror::output(cpu, *gpu, DType::F32, 1, layout.total);
        struct S {
          float scale, norm_sq;
          int32_t flags[5];
        } init{scale, -1.0f, {0, 0, 5, 0, 0}};
        Scalars s(cpu, *gpu, &init, sizeof init);
        cpu.amp_kernels().unscale_check(G.c.data, dt, spans, &s.c.as<S>()->scale, O.c.as<float>(), s.c.as<S>()->flags,
                          &s.c.as<S>()->norm_sq);
        gpu->amp_kernels().unscale_check(G.g.data, dt, spans, &s.g.as<S>()->scale, O.g.as<float>(), s.g.as<S>()->flags,
                           &s.g.as<S>()->norm_sq);
        // Bit-exact, except that a NaN only has to stay a NaN: x86 keeps the input's payload through
        // the multiply, the GPU returns its canonical NaN (the contract is "some NaN").
        const auto oc = read_raw(cpu, O.c.data, O.c.bytes()), og = read_raw(*gpu, O.g.data, O.g.bytes());
        REQUIRE(oc.size() == og.size());
        size_t differ = 0, first = 0;
        for (size_t i = 0; i < oc.size() / 4; ++i) {
          uint32_t bc, bg;
          std::memcpy(&bc, &oc[i * 4], 4);
          std::memcpy(&bg, &og[i * 4], 4);
          const bool nan_c = (bc & 0x7fffffffu) > 0x7f800000u, nan_g = (bg & 0x7fffffffu) > 0x7f800000u;
          if ((nan_c || nan_g) ? nan_c != nan_g : bc != bg) {
            if (differ++ == 0) first = i;
          }
        }
        INFO(differ << " unscaled values differ, first at " << first);
        CHECK(differ == 0);
        const S want = read_one<S>(cpu, s.c.data()), got = read_one<S>(*gpu, s.g.data());
        for (int i = 0; i < 5; ++i) CHECK(got.flags[i] == want.flags[i]);
        if (plant) CHECK(got.flags[OverflowFlags::kReduced] == 3);
        if (std::isfinite(want.norm_sq)) CHECK(got.norm_sq == Approx(want.norm_sq).epsilon(1e-6));
        else CHECK(std::isnan(got.norm_sq) == std::isnan(want.norm_sq));
        // Without the norm.
        gpu->amp_kernels().unscale_check(G.g.data, dt, spans, &s.g.as<S>()->scale, O.g.as<float>(), s.g.as<S>()->flags, nullptr);
        CHECK(f32_bits(read_one<S>(*gpu, s.g.data()).norm_sq) == f32_bits(got.norm_sq));  // untouched
      }
    }
  }
}

TEST_CASE("grad_stats: zero and subnormal fractions and max magnitude as the CPU", "[.cuda][amp]") {
  auto gpu = make_device();
  CpuBackend cpu(1);
  const ParamLayout layout = mlp_layout({100, 77, 5000, 3});
  const auto spans = spans_of(layout);
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    const float tiny = dt == DType::F16 ? 3e-6f : dt == DType::BF16 ? 1e-39f : 1e-40f;
    std::vector<float> g = randn(layout.total, 61);
    for (size_t i = 0; i < g.size(); i += 3) g[i] = 0.0f;
    for (size_t i = 1; i < g.size(); i += 7) g[i] = tiny * (i % 2 ? 1.0f : -1.0f);
    g[spans[1].offset + 2] = -kInf;
    g[spans[2].offset + 4100] = kNaN;
    INFO(dtype_name(dt));
    Mirror G(cpu, *gpu, g, dt, 1, layout.total);
    const auto want = cpu.amp_kernels().grad_stats(G.c.data, dt, spans), got = gpu->amp_kernels().grad_stats(G.g.data, dt, spans);
    REQUIRE(got.size() == want.size());
    for (size_t t = 0; t < want.size(); ++t) {
      INFO("tensor " << t);
      CHECK(got[t].zero_frac == want[t].zero_frac);
      CHECK(got[t].subnormal_frac == want[t].subnormal_frac);
      if (std::isnan(want[t].max_abs)) CHECK(std::isnan(got[t].max_abs));
      else CHECK(got[t].max_abs == want[t].max_abs);
    }
  }
}

TEST_CASE("optimizer_step: SGD and AdamW as the CPU, with clipping and the working copy, skip on the flag",
          "[.cuda][optim]") {
  auto gpu = make_device();
  CpuBackend cpu(2);
  const size_t n = 100003;
  const std::vector<float> w = randn(n, 71), g = randn(n, 72, 0.1), m = randn(n, 73, 0.01);
  std::vector<float> v = randn(n, 74, 1e-2);
  for (auto& x : v) x = x * x;
  double nsq = 0;
  for (float x : g) nsq += double(x) * x;
  struct S {
    float lr, norm_sq;
    int32_t flags[3];
    int32_t pad;
    ScalerState scaler;
  };
  OptimizerParams adamw;
  adamw.kind = OptimizerKind::AdamW;
  adamw.weight_decay = 0.01f;
  OptimizerParams sgd;
  sgd.kind = OptimizerKind::Sgd;
  sgd.momentum = 0.9f;
  sgd.nesterov = true;
  sgd.weight_decay = 1e-4f;
  OptimizerParams plain;
  plain.kind = OptimizerKind::Sgd;
  for (const OptimizerParams& p : {adamw, sgd, plain}) {
    for (float max_norm : {0.0f, 1.0f}) {
      for (DType lpt : {DType::F32, DType::F16, DType::BF16}) {
        for (int skip : {0, 1}) {
          INFO("optimizer " << int(p.kind) << " momentum " << p.momentum << " clip " << max_norm << " lp "
                            << dtype_name(lpt) << " skip " << skip);
          S init{};
          init.lr = 1e-3f;
          init.norm_sq = float(nsq);
          init.flags[OverflowFlags::kAny] = skip;
          init.scaler.optimizer_steps = 7;
          Scalars s(cpu, *gpu, &init, sizeof init);
          Mirror W(cpu, *gpu, w, DType::F32, 1, n), G(cpu, *gpu, g, DType::F32, 1, n);
          Mirror M(cpu, *gpu, m, DType::F32, 1, n), V(cpu, *gpu, v, DType::F32, 1, n);
          const bool with_lp = lpt != DType::F32;
          Mirror LP = Mirror::output(cpu, *gpu, lpt, 1, n);
          const bool momentum = p.kind == OptimizerKind::AdamW || p.momentum != 0.0f;
          for (int side = 0; side < 2; ++side) {
            Backend& be = side ? static_cast<Backend&>(*gpu) : static_cast<Backend&>(cpu);
            Mirror* mm[] = {&W, &G, &M, &V, &LP};
            auto t = [&](Mirror* x) { return side ? x->g : x->c; };
            S* sp = (side ? s.g : s.c).as<S>();
            OptimizerStepArgs a;
            a.params = p;
            a.lr = &sp->lr;
            a.max_norm = max_norm;
            a.master = t(mm[0]).as<float>(), a.g32 = t(mm[1]).as<float>();
            a.state1 = momentum ? t(mm[2]).as<float>() : nullptr;
            a.state2 = p.kind == OptimizerKind::AdamW ? t(mm[3]).as<float>() : nullptr;
            a.n = n;
            a.lp = with_lp ? t(mm[4]).data : nullptr, a.lp_dtype = lpt;
            a.verdict = AmpVerdict{sp->flags, &sp->norm_sq, &sp->scaler};
            be.optimizer().optimizer_step(a);
          }
          if (skip) {
            CHECK(read(*gpu, W.g) == w);
            CHECK(read(*gpu, M.g) == m);
          } else {
            // The host build contracts a*b + c into FMAs (-march=x86-64-v3, GCC's default
            // -ffp-contract=fast for C++), the kernels do not (--fmad=false): m = b1 m + (1 - b1) g
            // may differ by half an ulp of a product (~2e-9 for products near 0.03) where the two
            // terms cancel, so m's absolute term is 1e-8 (a wrong rule is off by ~1e-3).
            GPU_REQUIRE_CLOSE(read(*gpu, W.g), read(cpu, W.c), 1e-6, 1e-9);
            GPU_REQUIRE_CLOSE(read(*gpu, M.g), read(cpu, M.c), 1e-6, 1e-8);
            GPU_REQUIRE_CLOSE(read(*gpu, V.g), read(cpu, V.c), 1e-6, 1e-12);
          }
          // One 16-bit rounding apart at most; 1e-7 absolute covers a step of the fp16 subnormals.
          if (with_lp) GPU_REQUIRE_CLOSE(read(*gpu, LP.g), read(cpu, LP.c), 2 * eps_of(lpt), 1e-7);
        }
      }
    }
  }
}

TEST_CASE("update_scale: the device state machine follows the host's on a scripted overflow sequence",
          "[.cuda][amp]") {
  auto gpu = make_device();
  const int world = 3;
  ScalerParams dyn;
  dyn.mode = ScaleMode::Dynamic;
  dyn.init_scale = 1024.0f;
  dyn.growth_interval = 3;
  dyn.hysteresis = 2;
  dyn.min_scale = 64.0f;
  dyn.max_scale = 4096.0f;
  ScalerParams stat = dyn;
  stat.mode = ScaleMode::Static;
  ScalerParams none = dyn;
  none.mode = ScaleMode::None;
  // Overflow on these steps (ranks and tensors vary): runs long enough to back off to the minimum,
  // grow to the maximum, and exercise the hysteresis.
  const std::vector<int> bad = {2, 3, 4, 9, 15, 16, 17, 18, 19, 20, 21, 22, 30, 45};
  for (const ScalerParams& p : {dyn, stat, none}) {
    INFO("mode " << int(p.mode));
    ScalerState host = scaler_init(p);
    Buffer st = gpu->memory().alloc(sizeof(ScalerState)), fl = gpu->memory().alloc(OverflowFlags::count(world) * sizeof(int32_t));
    gpu->memory().upload(st.data(), &host, sizeof host);
    for (int step = 1; step <= 60; ++step) {
      std::vector<int32_t> flags(OverflowFlags::count(world), 0);
      if (std::find(bad.begin(), bad.end(), step) != bad.end()) {
        flags[OverflowFlags::kAny] = 1;
        flags[OverflowFlags::kReduced] = 1 + step % 4;
        flags[size_t(OverflowFlags::kRank0 + step % world)] = 1 + step % 5;
      }
      gpu->memory().upload(fl.data(), flags.data(), flags.size() * sizeof(int32_t));
      gpu->amp_kernels().update_scale(st.as<ScalerState>(), p, fl.as<int32_t>(), world);
      scaler_record_flags(host, flags.data(), world);
      scaler_update(host, p, flags[OverflowFlags::kAny] != 0);
      const ScalerState dev = read_one<ScalerState>(*gpu, st.data());
      INFO("step " << step << " scale host " << host.scale << " device " << dev.scale);
      REQUIRE(std::memcmp(&dev, &host, sizeof host) == 0);
    }
  }
}

TEST_CASE("check_norm + optimizer_step: clipping by a non-finite norm skips and marks kNormOverflow as the CPU does, an "
          "overflow step keeps its attribution",
          "[.cuda][optim]") {
  auto gpu = make_device();
  CpuBackend cpu(2);
  const size_t n = 50021;
  const std::vector<float> w = randn(n, 81), g = randn(n, 82, 0.1), m = randn(n, 83, 0.01);
  std::vector<float> v = randn(n, 84, 1e-2);
  for (auto& x : v) x = x * x;
  struct S {
    float lr, norm_sq;
    int32_t flags[4];  // world 2
    ScalerState scaler;
  };
  OptimizerParams adamw;
  adamw.kind = OptimizerKind::AdamW;
  adamw.weight_decay = 0.01f;
  OptimizerParams sgd;
  sgd.kind = OptimizerKind::Sgd;
  sgd.momentum = 0.9f;
  for (const OptimizerParams& p : {adamw, sgd}) {
    for (float norm_sq : {kInf, kNaN}) {
      for (float max_norm : {1.0f, 0.0f}) {
        for (int overflow : {0, 1}) {
          INFO("optimizer " << int(p.kind) << " norm_sq " << norm_sq << " clip " << max_norm << " overflow "
                            << overflow);
          S init{};
          init.lr = 1e-3f;
          init.norm_sq = norm_sq;
          init.scaler.optimizer_steps = 3;
          if (overflow) {  // non-finite gradients in tensor 2 (after the all-reduce) and on rank 1
            init.flags[OverflowFlags::kAny] = 1;
            init.flags[OverflowFlags::kReduced] = 3;
            init.flags[OverflowFlags::kRank0 + 1] = 3;
          }
          Scalars s(cpu, *gpu, &init, sizeof init);
          Mirror W(cpu, *gpu, w, DType::F32, 1, n), G(cpu, *gpu, g, DType::F32, 1, n);
          Mirror M(cpu, *gpu, m, DType::F32, 1, n), V(cpu, *gpu, v, DType::F32, 1, n);
          Mirror LP = Mirror::output(cpu, *gpu, DType::F16, 1, n);
          for (int side = 0; side < 2; ++side) {
            Backend& be = side ? static_cast<Backend&>(*gpu) : static_cast<Backend&>(cpu);
            auto t = [&](Mirror& x) { return side ? x.g : x.c; };
            S* sp = (side ? s.g : s.c).as<S>();
            be.amp_kernels().check_norm(&sp->norm_sq, max_norm, sp->flags);  // the norm's verdict, then the step
            OptimizerStepArgs a;
            a.params = p;
            a.lr = &sp->lr;
            a.max_norm = max_norm;
            a.master = t(W).as<float>(), a.g32 = t(G).as<float>(), a.state1 = t(M).as<float>();
            a.state2 = p.kind == OptimizerKind::AdamW ? t(V).as<float>() : nullptr;
            a.n = n;
            a.lp = t(LP).data, a.lp_dtype = DType::F16;
            a.verdict = AmpVerdict{sp->flags, &sp->norm_sq, &sp->scaler};
            be.optimizer().optimizer_step(a);
          }
          const S got_g = read_one<S>(*gpu, s.g.data());
          const S got_c = read_one<S>(cpu, s.c.data());
          CHECK(std::memcmp(got_g.flags, got_c.flags, sizeof got_g.flags) == 0);
          const bool skipped = overflow || max_norm > 0.0f;
          if (overflow) {
            CHECK(got_g.flags[OverflowFlags::kReduced] == 3);  // the tensor, not the norm
          } else if (max_norm > 0.0f) {
            CHECK(got_g.flags[OverflowFlags::kAny] == 1);
            CHECK(got_g.flags[OverflowFlags::kReduced] == OverflowFlags::kNormOverflow);
            CHECK(got_g.flags[OverflowFlags::kRank0] == 0);
            CHECK(got_g.flags[OverflowFlags::kRank0 + 1] == 0);
          } else {
            CHECK(got_g.flags[OverflowFlags::kAny] == 0);  // no clipping: the norm is not used
          }
          if (skipped) {  // masters, moments and the working copy untouched, bit for bit
            CHECK(read(*gpu, W.g) == w);
            CHECK(read(*gpu, M.g) == m);
            CHECK(read(*gpu, V.g) == v);
            CHECK(read(*gpu, LP.g) == std::vector<float>(n, 0.0f));
          } else {
            GPU_REQUIRE_CLOSE(read(*gpu, W.g), read(cpu, W.c), 1e-6, 1e-9);
            CHECK(read(*gpu, W.g) != w);
          }
        }
      }
    }
  }
}

TEST_CASE("sharded norm: partials in the flag slots, the sharded unscale pass and their sum match the CPU",
          "[.cuda][amp]") {
  auto gpu = make_device();
  CpuBackend cpu(2);
  const int world = 5;
  const size_t n = 3000;
  const std::vector<TensorSpan> spans = {{0, 1000}, {1000, 0}, {1024, 1976}};
  const std::vector<float> g = randn(n, 41, 2.0);
  for (DType dt : {DType::F16, DType::BF16}) {
    std::vector<uint16_t> raw(n);
    convert(g.data(), DType::F32, raw.data(), dt, n);
    // Each "rank" writes its partial into its own slots; the slots of all ranks then sum.
    std::vector<int32_t> fc(OverflowFlags::count(world), 0), fg(fc.size(), 0);
    Buffer gc = cpu.memory().alloc(n * 2), gg = gpu->memory().alloc(n * 2), oc = cpu.memory().alloc(n * 4), og = gpu->memory().alloc(n * 4);
    cpu.memory().upload(gc.data(), raw.data(), n * 2);
    gpu->memory().upload(gg.data(), raw.data(), n * 2);
    Buffer flc = cpu.memory().alloc(fc.size() * 4), flg = gpu->memory().alloc(fg.size() * 4);
    cpu.memory().upload(flc.data(), fc.data(), fc.size() * 4);
    gpu->memory().upload(flg.data(), fg.data(), fg.size() * 4);
    const float scale = 256.0f;
    Scalars sc(cpu, *gpu, &scale, sizeof scale);
    for (int r = 0; r < world; ++r) {
      cpu.amp_kernels().unscale_check(gc.data(), dt, spans, sc.c.as<float>(), oc.as<float>(), flc.as<int32_t>(), nullptr,
                        flc.as<int32_t>() + OverflowFlags::norm_slot(r, world));
      gpu->amp_kernels().unscale_check(gg.data(), dt, spans, sc.g.as<float>(), og.as<float>(), flg.as<int32_t>(), nullptr,
                         flg.as<int32_t>() + OverflowFlags::norm_slot(r, world));
    }
    float nc = 0, ng = 0;
    Buffer nbc = cpu.memory().alloc(4), nbg = gpu->memory().alloc(4);
    cpu.amp_kernels().sum_norm_partials(flc.as<int32_t>(), world, nbc.as<float>());
    gpu->amp_kernels().sum_norm_partials(flg.as<int32_t>(), world, nbg.as<float>());
    cpu.memory().download(&nc, nbc.data(), 4);
    gpu->memory().download(&ng, nbg.data(), 4);
    double want = 0;
    std::vector<float> back(n);
    convert(raw.data(), dt, back.data(), DType::F32, n);
    for (const auto& s : spans)
      for (size_t i = s.offset; i < s.offset + s.count; ++i) want += double(back[i] / scale) * double(back[i] / scale);
    INFO(dtype_name(dt));
    CHECK(double(ng) == Approx(want * world).epsilon(1e-6));
    CHECK(double(nc) == Approx(want * world).epsilon(1e-6));
    CHECK(std::fabs(double(ng) - double(nc)) <= 1e-6 * double(nc));
  }
}
