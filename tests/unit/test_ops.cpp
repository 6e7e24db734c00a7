// CPU backend operations: FP32 backward against finite differences of a double-precision forward,
// and 16-bit operations against FP32 on random data (tolerances stated per dtype).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include <omp.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul_dnnl.h"
#include "core/convert.h"
#include "core/half.h"
#include "core/rng.h"

using namespace amp;

namespace {

std::vector<float> randn(size_t n, uint64_t seed, double scale = 1.0) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(scale * r.normal());
  return v;
}

// Host data in a backend buffer of the given dtype.
struct Dev {
  Buffer buf;
  Tensor t;
  Dev(Backend& be, const std::vector<float>& v, DType dt, size_t rows, size_t cols) {
    buf = be.memory().alloc(v.size() * dtype_size(dt) + 64);
    convert(v.data(), DType::F32, buf.data(), dt, v.size());
    t = buf.tensor(dt, rows, cols);
  }
  std::vector<float> get() const {
    std::vector<float> v(t.numel());
    convert(t.data, t.dtype, v.data(), DType::F32, v.size());
    return v;
  }
};

double gelu_d(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

// Relative error in the max norm: max|a-b| / max|b|.
double rel_err(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(double(a[i]) - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return num / std::max(den, 1e-30);
}

}  // namespace

TEST_CASE("linear backward (FP32) matches finite differences in double", "[ops]") {
  CpuBackend be(1);
  const size_t B = 5, I = 7, O = 4;
  auto x = randn(B * I, 1), w = randn(O * I, 2, 0.5), b = randn(O, 3), r = randn(B * O, 4);
  // f(x, w, b) = sum(r * (x w^T + b)) in double.
  auto f = [&](const std::vector<double>& xd, const std::vector<double>& wd, const std::vector<double>& bd) {
    double s = 0;
    for (size_t i = 0; i < B; ++i)
      for (size_t o = 0; o < O; ++o) {
        double y = bd[o];
        for (size_t k = 0; k < I; ++k) y += xd[i * I + k] * wd[o * I + k];
        s += r[i * O + o] * y;
      }
    return s;
  };
  Dev X(be, x, DType::F32, B, I), W(be, w, DType::F32, O, I), Bb(be, b, DType::F32, 1, O), Y(be, std::vector<float>(B * O), DType::F32, B, O);
  Dev R(be, r, DType::F32, B, O), DX(be, std::vector<float>(B * I), DType::F32, B, I),
      DW(be, std::vector<float>(O * I), DType::F32, O, I), DB(be, std::vector<float>(O), DType::F32, 1, O);
  be.ops().linear_forward(X.t, W.t, Bb.t, Y.t);
  be.ops().linear_backward_input(R.t, W.t, DX.t);
  be.ops().linear_backward_weight(R.t, X.t, DW.t, DB.t);
  std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end()), bd(b.begin(), b.end());
  // Forward against double.
  std::vector<double> yref(B * O);
  for (size_t i = 0; i < B; ++i)
    for (size_t o = 0; o < O; ++o) {
      double y = bd[o];
      for (size_t k = 0; k < I; ++k) y += xd[i * I + k] * wd[o * I + k];
      yref[i * O + o] = y;
    }
  CHECK(rel_err(Y.get(), yref) < 1e-6);
  const double h = 1e-6;
  auto fd = [&](std::vector<double>& v, size_t j) {
    const double keep = v[j];
    v[j] = keep + h;
    const double up = f(xd, wd, bd);
    v[j] = keep - h;
    const double dn = f(xd, wd, bd);
    v[j] = keep;
    return (up - dn) / (2 * h);
  };
  std::vector<double> gx(B * I), gw(O * I), gb(O);
  for (size_t j = 0; j < gx.size(); ++j) gx[j] = fd(xd, j);
  for (size_t j = 0; j < gw.size(); ++j) gw[j] = fd(wd, j);
  for (size_t j = 0; j < gb.size(); ++j) gb[j] = fd(bd, j);
  CHECK(rel_err(DX.get(), gx) < 1e-5);
  CHECK(rel_err(DW.get(), gw) < 1e-5);
  CHECK(rel_err(DB.get(), gb) < 1e-5);
}

TEST_CASE("activation backward (FP32) matches finite differences", "[ops]") {
  CpuBackend be(1);
  const size_t n = 257;
  auto z = randn(n, 7, 2.0), dy = randn(n, 8);
  for (Activation a : {Activation::Relu, Activation::Gelu}) {
    Dev Z(be, z, DType::F32, 1, n), DY(be, dy, DType::F32, 1, n), Y(be, std::vector<float>(n), DType::F32, 1, n),
        DZ(be, std::vector<float>(n), DType::F32, 1, n);
    be.ops().activation_forward(a, Z.t, Y.t);
    be.ops().activation_backward(a, Z.t, DY.t, DZ.t);
    auto act = [&](double x) { return a == Activation::Relu ? (x > 0 ? x : 0.0) : gelu_d(x); };
    std::vector<double> yref(n), gref(n);
    for (size_t i = 0; i < n; ++i) {
      yref[i] = act(z[i]);
      const double h = 1e-5;
      gref[i] = dy[i] * (act(z[i] + h) - act(z[i] - h)) / (2 * h);
    }
    CHECK(rel_err(Y.get(), yref) < 1e-6);
    CHECK(rel_err(DZ.get(), gref) < 1e-5);
  }
}

TEST_CASE("softmax cross-entropy and MSE gradients match finite differences", "[ops]") {
  CpuBackend be(1);
  const size_t B = 6, C = 5;
  auto logits = randn(B * C, 11, 3.0);
  std::vector<int32_t> labels = {0, 4, 2, 2, 1, 3};
  const float scale = 256.0f, inv = 1.0f / float(B);
  auto loss_d = [&](const std::vector<double>& l) {
    double s = 0;
    for (size_t i = 0; i < B; ++i) {
      double mx = l[i * C];
      for (size_t j = 1; j < C; ++j) mx = std::max(mx, l[i * C + j]);
      double se = 0;
      for (size_t j = 0; j < C; ++j) se += std::exp(l[i * C + j] - mx);
      s += mx + std::log(se) - l[i * C + size_t(labels[i])];
    }
    return s;
  };
  Dev L(be, logits, DType::F32, B, C), G(be, std::vector<float>(B * C), DType::F32, B, C);
  float loss = 0;
  int32_t correct = 0;
  be.ops().softmax_xent(dense_xent_args(L.t, labels.data(), &scale, inv, G.t, &loss, &correct));
  std::vector<double> ld(logits.begin(), logits.end());
  CHECK(loss == Approx(loss_d(ld)).epsilon(1e-6));
  int expect_correct = 0;
  for (size_t i = 0; i < B; ++i) {
    size_t arg = 0;
    for (size_t j = 1; j < C; ++j)
      if (logits[i * C + j] > logits[i * C + arg]) arg = j;
    expect_correct += arg == size_t(labels[i]);
  }
  CHECK(correct == expect_correct);
  std::vector<double> g(B * C);
  for (size_t j = 0; j < g.size(); ++j) {
    const double h = 1e-6, keep = ld[j];
    ld[j] = keep + h;
    const double up = loss_d(ld);
    ld[j] = keep - h;
    const double dn = loss_d(ld);
    ld[j] = keep;
    g[j] = (up - dn) / (2 * h) * scale * inv;  // the loss-scaled gradient of the mean
  }
  CHECK(rel_err(G.get(), g) < 1e-5);

  // MSE: sum of squares, gradient 2 (p - t) * scale * inv_count.
  auto pred = randn(12, 21), target = randn(12, 22);
  Dev P(be, pred, DType::F32, 12, 1), T(be, target, DType::F32, 12, 1), DP(be, std::vector<float>(12), DType::F32, 12, 1);
  float mse = 0;
  const float one = 1.0f;
  be.ops().mse(P.t, T.t, &one, 1.0f / 12, DP.t, &mse);
  double ref = 0;
  std::vector<double> gm(12);
  for (size_t i = 0; i < 12; ++i) {
    ref += double(pred[i] - target[i]) * (pred[i] - target[i]);
    gm[i] = 2.0 * (pred[i] - target[i]) / 12.0;
  }
  CHECK(mse == Approx(ref).epsilon(1e-6));
  CHECK(rel_err(DP.get(), gm) < 1e-6);
}

TEST_CASE("16-bit linear layers agree with FP32 within the format's precision", "[ops]") {
  CpuBackend be(2);
  const size_t B = 33, I = 300, O = 65;  // odd sizes exercise tails
  auto x = randn(B * I, 31), w = randn(O * I, 32, 0.05), b = randn(O, 33, 0.1), dy = randn(B * O, 34);
  Dev X(be, x, DType::F32, B, I), W(be, w, DType::F32, O, I), Bb(be, b, DType::F32, 1, O), Y(be, std::vector<float>(B * O), DType::F32, B, O);
  Dev DY(be, dy, DType::F32, B, O), DX(be, std::vector<float>(B * I), DType::F32, B, I),
      DW(be, std::vector<float>(O * I), DType::F32, O, I), DB(be, std::vector<float>(O), DType::F32, 1, O);
  be.ops().linear_forward(X.t, W.t, Bb.t, Y.t);
  be.ops().linear_backward_input(DY.t, W.t, DX.t);
  be.ops().linear_backward_weight(DY.t, X.t, DW.t, DB.t);
  const auto y32 = Y.get(), dx32 = DX.get(), dw32 = DW.get(), db32 = DB.get();
  auto as_d = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  // Inputs are rounded to 16 bits, then FP32 accumulation, then one rounding: the error is a few
  // units of the format's epsilon (2^-11 for fp16, 2^-8 for bf16) relative to the largest output.
  for (DType dt : {DType::F16, DType::BF16}) {
    const double tol = dt == DType::F16 ? 4e-3 : 3e-2;
    Dev x16(be, x, dt, B, I), w16(be, w, dt, O, I), b16(be, b, dt, 1, O), y16(be, std::vector<float>(B * O), dt, B, O);
    Dev dy16(be, dy, dt, B, O), dx16(be, std::vector<float>(B * I), dt, B, I), dw16(be, std::vector<float>(O * I), dt, O, I),
        db16(be, std::vector<float>(O), dt, 1, O);
    be.ops().linear_forward(x16.t, w16.t, b16.t, y16.t);
    be.ops().linear_backward_input(dy16.t, w16.t, dx16.t);
    be.ops().linear_backward_weight(dy16.t, x16.t, dw16.t, db16.t);
    CHECK(rel_err(y16.get(), as_d(y32)) < tol);
    CHECK(rel_err(dx16.get(), as_d(dx32)) < tol);
    CHECK(rel_err(dw16.get(), as_d(dw32)) < tol);
    CHECK(rel_err(db16.get(), as_d(db32)) < tol);
    CHECK(rel_err(y16.get(), as_d(y32)) > 0);  // the 16-bit path really rounds
  }
}

TEST_CASE("16-bit activations and losses agree with FP32", "[ops]") {
  CpuBackend be(2);
  const size_t B = 64, C = 10, n = 10000;
  auto z = randn(n, 41, 2.0), dy = randn(n, 42);
  for (DType dt : {DType::F16, DType::BF16}) {
    const double tol = dt == DType::F16 ? 2e-3 : 1.6e-2;
    for (Activation a : {Activation::Relu, Activation::Gelu}) {
      Dev Z(be, z, DType::F32, 1, n), DY(be, dy, DType::F32, 1, n), Y(be, std::vector<float>(n), DType::F32, 1, n),
          DZ(be, std::vector<float>(n), DType::F32, 1, n);
      Dev Z16(be, z, dt, 1, n), DY16(be, dy, dt, 1, n), Y16(be, std::vector<float>(n), dt, 1, n), DZ16(be, std::vector<float>(n), dt, 1, n);
      be.ops().activation_forward(a, Z.t, Y.t);
      be.ops().activation_backward(a, Z.t, DY.t, DZ.t);
      be.ops().activation_forward(a, Z16.t, Y16.t);
      be.ops().activation_backward(a, Z16.t, DY16.t, DZ16.t);
      const auto y = Y.get(), g = DZ.get();
      CHECK(rel_err(Y16.get(), std::vector<double>(y.begin(), y.end())) < tol);
      CHECK(rel_err(DZ16.get(), std::vector<double>(g.begin(), g.end())) < 3 * tol);
    }
    auto logits = randn(B * C, 43, 2.0);
    std::vector<int32_t> labels(B);
    for (size_t i = 0; i < B; ++i) labels[i] = int32_t(i % C);
    Dev L(be, logits, DType::F32, B, C), G(be, std::vector<float>(B * C), DType::F32, B, C);
    Dev L16(be, logits, dt, B, C), G16(be, std::vector<float>(B * C), dt, B, C);
    const float scale = 1024.0f;
    float l32 = 0, l16 = 0;
    int32_t c32 = 0, c16 = 0;
    be.ops().softmax_xent(dense_xent_args(L.t, labels.data(), &scale, 1.0f / B, G.t, &l32, &c32));
    be.ops().softmax_xent(dense_xent_args(L16.t, labels.data(), &scale, 1.0f / B, G16.t, &l16, &c16));
    CHECK(l16 == Approx(l32).epsilon(tol));
    const auto g = G.get();
    CHECK(rel_err(G16.get(), std::vector<double>(g.begin(), g.end())) < 3 * tol);
  }
}

TEST_CASE("FP16 gradients underflow without a loss scale and survive with one", "[ops]") {
  CpuBackend be(1);
  const size_t B = 4096, C = 10;  // a large batch makes per-sample gradients tiny (1/B)
  auto logits = randn(B * C, 51, 6.0);  // confident predictions: most probabilities are tiny
  std::vector<int32_t> labels(B);
  for (size_t i = 0; i < B; ++i) labels[i] = int32_t((i * 7) % C);
  Dev L(be, logits, DType::F16, B, C), G(be, std::vector<float>(B * C), DType::F16, B, C);
  auto zeros = [&](float scale) {
    float loss = 0;
    int32_t correct = 0;
    be.ops().softmax_xent(dense_xent_args(L.t, labels.data(), &scale, 1.0f / B, G.t, &loss, &correct));
    size_t z = 0;
    for (float v : G.get()) z += v == 0.0f;
    return double(z) / double(B * C);
  };
  const double unscaled = zeros(1.0f), scaled = zeros(65536.0f);
  CHECK(unscaled > 0.2);
  CHECK(scaled < unscaled / 4);
}

TEST_CASE("fused unscale pass: values, non-finite detection, norm", "[ops]") {
  CpuBackend be(2);
  const size_t n = 70001;
  auto g = randn(n, 61, 100.0);
  std::vector<TensorSpan> spans = {{0, 1000}, {1024, 30000}, {31040, n - 31040}};
  for (DType dt : {DType::F16, DType::BF16, DType::F32}) {
    Dev G(be, g, dt, 1, n);
    std::vector<float> out(n);
    int32_t flags[4] = {0, 0, 0, 0};
    float norm_sq = 0;
    const float scale = 512.0f;
    be.amp_kernels().unscale_check(G.t.data, dt, spans, &scale, out.data(), flags, &norm_sq);
    CHECK(flags[0] == 0);
    CHECK(flags[1] == 0);
    const auto stored = G.get();
    double ref = 0;
    for (const auto& s : spans)
      for (size_t i = s.offset; i < s.offset + s.count; ++i) {
        REQUIRE(out[i] == stored[i] * float(1.0 / 512.0));
        ref += double(out[i]) * out[i];
      }
    CHECK(norm_sq == Approx(ref).epsilon(1e-6));
    // A NaN in the middle tensor and an inf in the last: the first one is reported.
    std::vector<float> bad = g;
    bad[40000] = INFINITY;
    bad[2000] = NAN;
    Dev B(be, bad, dt, 1, n);
    be.amp_kernels().unscale_check(B.t.data, dt, spans, &scale, out.data(), flags, &norm_sq);
    CHECK(flags[0] == 1);
    CHECK(flags[1] == 2);  // 1 + tensor index 1
    int32_t f = 0;
    be.amp_kernels().find_nonfinite(B.t.data, dt, spans, 1500, 3000, &f);  // a range inside tensor 1 holding the NaN
    CHECK(f == 2);
    f = 0;
    be.amp_kernels().find_nonfinite(B.t.data, dt, spans, 30000, n, &f);  // starts inside tensor 1, past its NaN
    CHECK(f == 3);
    f = 0;
    be.amp_kernels().find_nonfinite(B.t.data, dt, spans, 31040, n, &f);
    CHECK(f == 3);
    f = 0;
    be.amp_kernels().find_nonfinite(B.t.data, dt, spans, 0, 1024, &f);
    CHECK(f == 0);
  }
}

TEST_CASE("optimizer step skips on the flag and writes the working copy", "[ops]") {
  CpuBackend be(2);
  const size_t n = 5000;
  auto w = randn(n, 71), g = randn(n, 72, 0.1);
  OptimizerParams p;
  p.kind = OptimizerKind::AdamW;
  p.weight_decay = 0.01f;
  std::vector<float> m(n, 0), v(n, 0);
  std::vector<uint16_t> lp(n);
  ScalerState s;
  float norm_sq = 4.0f;
  int32_t flags[3] = {1, 1, 0};
  const float lr = 1e-3f, one = 1.0f;
  std::vector<float> w0 = w;
  OptimizerStepArgs a;
  a.params = p;
  a.lr = &lr;
  a.master = w.data(), a.g32 = g.data(), a.state1 = m.data(), a.state2 = v.data(), a.n = n;
  a.lp = lp.data(), a.lp_dtype = DType::BF16;
  a.verdict = AmpVerdict{flags, &norm_sq, &s};
  be.optimizer().optimizer_step(a);
  CHECK(w == w0);  // skipped: nothing changed
  CHECK(m == std::vector<float>(n, 0.0f));
  flags[0] = 0;
  be.optimizer().optimizer_step(a);
  for (size_t i = 0; i < n; ++i) {
    // First AdamW step: m_hat = g, v_hat = g^2, so the update is lr * sign(g) (up to eps).
    const double expect = double(w0[i]) * (1 - 1e-3 * 0.01) - 1e-3 * g[i] / (std::fabs(double(g[i])) + 1e-8);
    REQUIRE(w[i] == Approx(expect).epsilon(1e-5));
    REQUIRE(lp[i] == float_to_bf16_bits(w[i]));
  }
  // Clipping: norm 2 with max_norm 0.5 scales the gradient by 0.25 (SGD shows it directly).
  OptimizerParams sgd;
  sgd.kind = OptimizerKind::Sgd;
  std::vector<float> ws = w0;
  OptimizerStepArgs b;
  b.params = sgd;
  b.lr = &one;
  b.max_norm = 0.5f;
  b.master = ws.data(), b.g32 = g.data(), b.n = n;
  b.verdict = a.verdict;
  be.optimizer().optimizer_step(b);
  for (size_t i = 0; i < 10; ++i) CHECK(ws[i] == Approx(w0[i] - 0.25f * (0.5f / (0.5f + 0.5e-6f / 2)) * g[i]).epsilon(1e-5));
}

TEST_CASE("softmax cross-entropy with padded rows: the dense results, padding never read or written", "[ops]") {
  CpuBackend be(2);
  const size_t B = 37, C = 300, ldl = 384, ldd = 320;  // a padded vocabulary's rows, two strides
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    INFO(dtype_name(dt));
    const auto logits = randn(B * C, 61, 3.0);
    std::vector<int32_t> labels(B);
    for (size_t i = 0; i < B; ++i) labels[i] = int32_t((i * 37) % C);
    // Dense reference.
    Dev L(be, logits, dt, B, C), G(be, std::vector<float>(B * C), dt, B, C);
    const float scale = 512.0f;
    float loss = 0;
    int32_t hits = 0;
    be.ops().softmax_xent(dense_xent_args(L.t, labels.data(), &scale, 1.0f / B, G.t, &loss, &hits));
    // Padded: the same rows at a stride, NaN in every padding element of both buffers.
    std::vector<float> lp(B * ldl, std::nanf("")), gp(B * ldd, std::nanf(""));
    for (size_t r = 0; r < B; ++r)
      std::copy(logits.begin() + long(r * C), logits.begin() + long(r * C + C), lp.begin() + long(r * ldl));
    Dev LP(be, lp, dt, B, ldl), GP(be, gp, dt, B, ldd);
    float loss_p = 0;
    int32_t hits_p = 0;
    SoftmaxXentArgs a;
    a.logits = LP.t.data, a.logits_type = dt, a.rows = int64_t(B), a.classes = int64_t(C), a.ld_logits = int64_t(ldl);
    a.labels = labels.data(), a.scale = &scale, a.inv_count = 1.0f / B;
    a.dlogits = GP.t.data, a.dlogits_type = dt, a.ld_dlogits = int64_t(ldd), a.loss_sum = &loss_p, a.correct = &hits_p;
    be.ops().softmax_xent(a);
    CHECK(f32_bits(loss_p) == f32_bits(loss));
    CHECK(hits_p == hits);
    const std::vector<float> g = G.get(), g_p = GP.get();
    size_t differ = 0, padding_written = 0;
    for (size_t r = 0; r < B; ++r) {
      for (size_t j = 0; j < C; ++j) differ += f32_bits(g_p[r * ldd + j]) != f32_bits(g[r * C + j]);
      for (size_t j = C; j < ldd; ++j) padding_written += !std::isnan(g_p[r * ldd + j]);
    }
    CHECK(differ == 0);
    CHECK(padding_written == 0);
    // A leading dimension below the classes is refused.
    a.ld_logits = int64_t(C - 1);
    CHECK_THROWS_AS(be.ops().softmax_xent(a), Error);
  }
}

TEST_CASE("bias gradient: each column summed over the rows in row order, bit for bit at 1, 2 and 3 threads",
          "[ops]") {
  const int saved = omp_get_max_threads();
  Rng rng(77);
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (const auto& [rows, cols] : std::vector<std::pair<size_t, size_t>>{{1, 1}, {37, 70}, {300, 384}, {64, 1100}, {96, 1536}, {9, 9000}}) {
      std::vector<float> x(rows * cols);
      for (float& v : x) v = float(rng.normal()) * 3.0f;
      std::vector<char> dy(x.size() * dtype_size(dt)), db(cols * dtype_size(dt));
      convert(x.data(), DType::F32, dy.data(), dt, x.size());
      convert(dy.data(), dt, x.data(), DType::F32, x.size());  // the values as stored
      std::vector<float> want(cols, 0.0f);
      for (size_t r = 0; r < rows; ++r)
        for (size_t c = 0; c < cols; ++c) want[c] += x[r * cols + c];
      std::vector<char> want_db(db.size());
      convert(want.data(), DType::F32, want_db.data(), dt, cols);
      for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        std::fill(db.begin(), db.end(), char(0x55));
        cpu::bias_grad(Tensor{dy.data(), dt, rows, cols}, Tensor{db.data(), dt, 1, cols});
        INFO(dtype_name(dt) << " " << rows << " x " << cols << ", " << threads << " thread(s)");
        CHECK(db == want_db);
      }
    }
  omp_set_num_threads(saved);
}

TEST_CASE("linear layers: the same bits at 1, 2 and 3 threads, every element written, within FP32 of double",
          "[ops]") {
  // matmul_dnnl.h cuts a product into tiles by its shape, shared out among the threads; the bits
  // must not depend on the thread count.
  CpuBackend be(1);
  auto& ops = be.cpu_ops();
  const int saved = omp_get_max_threads();
  const char* isa_limit = std::getenv("ONEDNN_MAX_CPU_ISA");
  struct Shape { size_t rows, in, out; };
  // 64 and 256 rows over K = 3072 (GPT-2's mlp.proj, sampling's 64 positions): on AMX, row slices
  // of one product per thread gave other bits than the whole (matmul_dnnl.cpp, tiles()). 1 and 3
  // rows (sampling's one position a token): their columns cut into tiles.
  const std::vector<Shape> shapes{{2048, 384, 1152}, {200, 130, 96}, {65, 300, 257},  {96, 1536, 384}, {31, 64, 48},
                                  {64, 3072, 768},   {256, 3072, 768}, {1, 768, 3072}, {3, 3072, 768}};
  int split = 0;
  std::set<std::string> impls;
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (const Shape& sh : shapes) {
      const auto x = randn(sh.rows * sh.in, 11), w = randn(sh.out * sh.in, 12, 0.1), b = randn(sh.out, 13),
                 dy = randn(sh.rows * sh.out, 14);
      Dev tx(be, x, dt, sh.rows, sh.in), tw(be, w, dt, sh.out, sh.in), tb(be, b, dt, 1, sh.out),
          tdy(be, dy, dt, sh.rows, sh.out);
      const auto xs = tx.get(), ws = tw.get(), bs = tb.get(), dys = tdy.get();  // the values as stored
      // In double, with unit-stride inner loops the compiler vectorizes (double's sums in any order
      // are far below the tolerances).
      std::vector<double> y_ref(sh.rows * sh.out), dx_ref(sh.rows * sh.in), dw_ref(sh.out * sh.in);
      for (size_t r = 0; r < sh.rows; ++r) {
        const float* x_r = xs.data() + r * sh.in;
        double* dx_r = dx_ref.data() + r * sh.in;
        for (size_t o = 0; o < sh.out; ++o) {
          const float* w_o = ws.data() + o * sh.in;
          double* dw_o = dw_ref.data() + o * sh.in;
          double a = 0;
#pragma omp simd reduction(+ : a)
          for (size_t i = 0; i < sh.in; ++i) a += double(x_r[i]) * w_o[i];
          y_ref[r * sh.out + o] = a + bs[o];
          const double g = dys[r * sh.out + o];
#pragma omp simd
          for (size_t i = 0; i < sh.in; ++i) {
            dx_r[i] += g * w_o[i];
            dw_o[i] += g * x_r[i];
          }
        }
      }
      // The three products as the linear ops hand them to oneDNN (16-bit operands it cannot take
      // widened to FP32).
      const DType mt = dt == DType::F16 || (dt == DType::BF16 && !ops.bf16_native()) ? DType::F32 : dt;
      cpu::MatmulShape prod[3];
      prod[0].m = sh.rows, prod[0].n = sh.out, prod[0].k = sh.in, prod[0].trans_b = true;
      prod[0].has_bias = true, prod[0].bias = mt;
      prod[1].m = sh.rows, prod[1].n = sh.in, prod[1].k = sh.out;
      prod[2].m = sh.out, prod[2].n = sh.in, prod[2].k = sh.rows, prod[2].trans_a = true;
      for (auto& p : prod) p.ab = mt, p.c = mt;
      std::vector<float> first[3];
      const auto nans = [](size_t rows, size_t cols) { return std::vector<float>(rows * cols, std::nanf("")); };
      for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        Dev y(be, nans(sh.rows, sh.out), dt, sh.rows, sh.out), dx(be, nans(sh.rows, sh.in), dt, sh.rows, sh.in),
            dw(be, nans(sh.out, sh.in), dt, sh.out, sh.in), db(be, nans(1, sh.out), dt, 1, sh.out);
        ops.linear_forward(tx.t, tw.t, tb.t, y.t);
        ops.linear_backward_input(tdy.t, tw.t, dx.t);
        ops.linear_backward_weight(tdy.t, tx.t, dw.t, db.t);
        const std::vector<float> got[3] = {y.get(), dx.get(), dw.get()};
        const std::vector<double>* ref[3] = {&y_ref, &dx_ref, &dw_ref};
        const double tol = dt == DType::F32 ? 1e-5 : dt == DType::BF16 ? 1e-2 : 2e-3;  // the output's rounding
        for (int o = 0; o < 3; ++o) {
          const cpu::MatmulTiles tiles = ops.matmul().tiles(prod[o]);
          const std::string impl = ops.matmul().implementation(prod[o]);
          split += tiles.count() > 1;
          impls.insert(impl);
          INFO(dtype_name(dt) << " rows " << sh.rows << " in " << sh.in << " out " << sh.out << ", " << threads
                              << " thread(s), " << (o == 0 ? "forward" : o == 1 ? "backward input" : "backward weight")
                              << ": " << impl << ", " << tiles.rows << " x " << tiles.cols << " tile(s); oneDNN ISA limit "
                              << (isa_limit ? isa_limit : "none"));
          CHECK(std::count_if(got[o].begin(), got[o].end(), [](float v) { return !std::isfinite(v); }) == 0);
          CHECK(rel_err(got[o], *ref[o]) < tol);
          if (threads == 1) {
            first[o] = got[o];
            continue;
          }
          size_t differ = 0;
          for (size_t i = 0; i < got[o].size(); ++i) differ += std::memcmp(&got[o][i], &first[o][i], sizeof(float)) != 0;
          CHECK(differ == 0);
        }
      }
    }
  omp_set_num_threads(saved);
  CHECK(split > 0);  // the tiles were tried (every product but small ones and brgemm's A^T B)
  std::string ran;
  for (const auto& i : impls) ran += (ran.empty() ? "" : ", ") + i;
  WARN("linear products ran on oneDNN's " << ran << " (ISA limit " << (isa_limit ? isa_limit : "none") << "), "
                                          << split << " of them cut into tiles");
}

TEST_CASE("linear layers: row tiles on one reordered B, and C streamed out, give each tile's own product's bits",
          "[ops]") {
  // BF16 products on brgemm whose row tiles all read the whole of B run on one copy of B in the
  // primitives' layout (matmul_dnnl.h); each tile must keep the bits of its own product, which a
  // product of that tile's rows alone (one tile) computes on the plain B. A 16-bit C of at least
  // kStreamCBytes is written through the worker's buffer with streaming stores: the tiles alone
  // (each below that) write it directly, with the same bits; a strided C (ldc > n) too.
  CpuBackend be(1);
  auto& ops = be.cpu_ops();
  if (!ops.bf16_native()) {
    WARN("AMP_TEST_SKIPPED: oneDNN runs no native BF16 products on this CPU (no reordered B)");
    return;
  }
  auto& mm = ops.matmul();
  struct Case { size_t m, n, k; bool trans_b, bias, shares; size_t ldc = 0; };
  // The char shape's forward products (qkv, proj, fc, mlp.proj), a backward-input product, a row
  // count whose last tile is shorter, and a B above kSharedBMax (2000 x 2100: the plain B).
  const std::vector<Case> cases{{2048, 1152, 384, true, true, true},  {2048, 384, 384, true, true, true},
                                {2048, 1536, 384, true, true, true},  {2048, 384, 1536, true, true, true},
                                {2048, 384, 1152, false, false, true}, {1000, 200, 130, true, true, true},
                                {512, 2000, 2100, true, true, false},
                                {2048, 1152, 256, true, true, false, 1184}, {2048, 1536, 192, false, false, false, 1600}};
  int shared = 0, streamed = 0;
  for (const Case& c : cases) {
    cpu::MatmulShape s;
    s.m = c.m, s.n = c.n, s.k = c.k, s.trans_b = c.trans_b, s.has_bias = c.bias;
    s.ab = s.c = s.bias = DType::BF16;
    s.ldc = c.ldc;
    const size_t ldc = s.c_stride();
    const auto bits = [](const std::vector<float>& v) {
      std::vector<uint16_t> b(v.size());
      for (size_t i = 0; i < v.size(); ++i) b[i] = float_to_bf16_bits(v[i]);
      return b;
    };
    const std::vector<uint16_t> a = bits(randn(c.m * c.k, 81)), b = bits(randn(c.k * c.n, 82, 0.1)),
                                bias = bits(randn(c.n, 83));
    std::vector<uint16_t> whole(c.m * ldc, 0xffff), tiled(c.m * ldc, 0xffff);
    const std::string impl = mm.implementation(s);
    const cpu::MatmulTiles t = mm.tiles(s);
    const bool reordered = impl.find("B reordered once") != std::string::npos;
    shared += reordered;
    const bool streams = impl.find("(C streamed out)") != std::string::npos;
    streamed += streams;
    CHECK(streams == (c.m * c.n * 2 >= cpu::DnnlMatmul::kStreamCBytes));
    mm.run(s, a.data(), b.data(), bias.data(), whole.data());
    for (int i = 0; i < t.rows; ++i) {  // each row tile alone: one tile, the plain B, C written directly
      cpu::MatmulShape one = s;
      one.m = t.row(i + 1) - t.row(i);
      REQUIRE(mm.tiles(one).count() == 1);
      CHECK(mm.implementation(one).find("streamed") == std::string::npos);
      mm.run(one, a.data() + t.row(i) * c.k, b.data(), bias.data(), tiled.data() + t.row(i) * ldc);
    }
    size_t differ = 0;
    for (size_t e = 0; e < whole.size(); ++e) differ += whole[e] != tiled[e];
    INFO(c.m << " x " << c.n << " x " << c.k << (c.trans_b ? " (B^T)" : "") << " ldc " << ldc << ": " << impl << ", "
              << t.rows << " row tile(s)");
    CHECK(differ == 0);
    if (impl.rfind("brg:", 0) == 0) CHECK(reordered == c.shares);
  }
  WARN(shared << " of " << cases.size() << " products ran their row tiles on one reordered B, " << streamed
               << " streamed C out");
  CHECK(shared > 0);  // native BF16 runs on brgemm, where the path applies
  CHECK(streamed >= 3);
}
