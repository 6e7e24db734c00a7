// FP8 compute (precision.compute fp8) below the trainer: the CPU quantize op against the scalar
// specification (amp/fp8_scaling.h: fp8_quantized over core/fp8.h's casts), element by element
// with its amax word and counts; the power-of-two scale; the once-per-step update against a
// transcription of the delayed-scaling rule; and the linear layers' FP8 seam (model/linear_layers.h)
// against the compute-dtype ops on spec-quantized operands.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "amp/fp8_scaling.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_ops.h"
#include "core/convert.h"
#include "core/half.h"
#include "core/rng.h"
#include "model/linear_layers.h"

using namespace amp;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Values over every regime of both formats: normal values over 60 binades, zeros, subnormals of
// FP32, both formats' subnormal and overflow edges and their midpoints, infinities and NaN.
std::vector<float> hostile_values(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v;
  const float edges[] = {0.0f, -0.0f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN(),
                         std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(),
                         448.0f, 464.0f, 479.9f, 480.0f, 57344.0f, 61439.0f, 61440.0f, 65536.0f,
                         std::ldexp(1.0f, -9), std::ldexp(1.5f, -10), std::ldexp(1.0f, -10), std::ldexp(1.0f, -16),
                         std::ldexp(1.5f, -17), std::ldexp(1.0f, -17), std::ldexp(1.0f, -6), std::ldexp(1.9375f, -7)};
  for (float e : edges) v.push_back(e), v.push_back(-e);
  while (v.size() < n) {
    const float m = float(rng.normal());
    v.push_back(std::ldexp(m, int(rng.below(60)) - 40));
  }
  v.resize(n);
  return v;
}

bool same_bits_or_nan(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  uint32_t x, y;
  std::memcpy(&x, &a, 4), std::memcpy(&y, &b, 4);
  return x == y;
}

// The value a dtype stores for f (the op rounds its result once to dst's dtype).
float stored(float f, DType t) {
  if (t == DType::BF16) return bf16_bits_to_float(float_to_bf16_bits(f));
  return f;
}

}  // namespace

TEST_CASE("fp8: pow2_floor rounds a scale down to a power of two within [2^-126, 2^126]", "[fp8][scaling]") {
  CHECK(pow2_floor(1.0f) == 1.0f);
  CHECK(pow2_floor(3.0f) == 2.0f);
  CHECK(pow2_floor(0.75f) == 0.5f);
  CHECK(pow2_floor(448.0f / 3.953125f) == 64.0f);
  CHECK(pow2_floor(kInf) == std::ldexp(1.0f, 126));
  CHECK(pow2_floor(std::numeric_limits<float>::max()) == std::ldexp(1.0f, 126));
  CHECK(pow2_floor(std::numeric_limits<float>::denorm_min()) == std::ldexp(1.0f, -126));
  Rng rng(3);
  for (int i = 0; i < 1000; ++i) {
    const float s = std::ldexp(float(rng.uniform()) + 0.5f, int(rng.below(200)) - 100);
    const float p = pow2_floor(s);
    REQUIRE(p <= s);
    REQUIRE(2.0f * p > s);
    int e = 0;
    REQUIRE(std::frexp(p, &e) == 0.5f);  // a power of two
  }
}

TEST_CASE("fp8: the CPU quantize op equals the specification, with its amax word and counts", "[fp8][ops]") {
  cpu::CpuOps ops;
  struct Types {
    DType src, dst;
  };
  for (const Types ty : {Types{DType::F32, DType::F32}, Types{DType::BF16, DType::BF16}, Types{DType::F32, DType::BF16}}) {
    for (Fp8 f : {Fp8::E4M3, Fp8::E5M2}) {
      for (float scale : {std::ldexp(1.0f, -8), 1.0f, std::ldexp(1.0f, 6), std::ldexp(1.0f, 20)}) {
        for (size_t n : {size_t(100), size_t(50000)}) {  // serial, and blocks in parallel
          INFO(dtype_name(ty.src) << " -> " << dtype_name(ty.dst) << (f == Fp8::E4M3 ? " e4m3" : " e5m2") << " scale "
                                  << scale << " n " << n);
          const std::vector<float> v = hostile_values(n, n + uint64_t(scale) + (f == Fp8::E5M2));
          std::vector<char> src(n * dtype_size(ty.src)), dst(n * dtype_size(ty.dst));
          convert(v.data(), DType::F32, src.data(), ty.src, n);
          std::vector<float> x(n);  // what the op reads
          convert(src.data(), ty.src, x.data(), DType::F32, n);
          int32_t amax = 0;
          int64_t counts[3] = {5, 0, 0};  // added to
          Fp8QuantizeArgs a;
          a.src = src.data(), a.src_type = ty.src, a.dst = dst.data(), a.dst_type = ty.dst, a.n = int64_t(n);
          a.format = f, a.scale = &scale, a.amax = &amax, a.counts = counts;
          ops.fp8_quantize(a);
          std::vector<float> got(n);
          convert(dst.data(), ty.dst, got.data(), DType::F32, n);
          int32_t want_amax = 0;
          int64_t flushed = 0, saturated = 0;
          size_t wrong = 0, nonzero_changed = 0;
          for (size_t i = 0; i < n; ++i) {
            const float q = fp8_quantized(x[i], scale, 1.0f / scale, f);
            wrong += !same_bits_or_nan(got[i], stored(q, ty.dst));
            want_amax = std::max(want_amax, amax_bits(x[i]));
            if (std::isfinite(x[i])) {
              flushed += q == 0.0f && x[i] != 0.0f;
              saturated += std::fabs(x[i] * scale) > fp8_max(f);
              nonzero_changed += q != x[i];
            }
          }
          CHECK(wrong == 0);
          CHECK(nonzero_changed > n / 4);  // the cast did round: not an identity
          CHECK(amax == want_amax);
          CHECK(counts[0] == 5 + int64_t(n));
          CHECK(counts[1] == flushed);
          CHECK(counts[2] == saturated);
        }
      }
    }
  }
}

TEST_CASE("fp8: non-finite values pass through the cast and win the amax, finite ones saturate", "[fp8][ops]") {
  cpu::CpuOps ops;
  const float scale = 1.0f;
  std::vector<float> x = {1.0f, kInf, -2.0f, 1e6f, -1e6f};
  std::vector<float> y(x.size());
  int32_t amax = 0;
  Fp8QuantizeArgs a;
  a.src = x.data(), a.src_type = DType::F32, a.dst = y.data(), a.dst_type = DType::F32, a.n = int64_t(x.size());
  a.format = Fp8::E5M2, a.scale = &scale, a.amax = &amax;
  ops.fp8_quantize(a);
  CHECK(y[1] == kInf);  // an overflowing gradient stays infinite: the step's overflow check sees it
  CHECK(y[3] == 57344.0f);
  CHECK(y[4] == -57344.0f);
  CHECK(amax_from_bits(amax) == kInf);
  x[1] = std::numeric_limits<float>::quiet_NaN();
  a.format = Fp8::E4M3;
  ops.fp8_quantize(a);
  CHECK(std::isnan(y[1]));
  CHECK(y[3] == 448.0f);
  CHECK(std::isnan(amax_from_bits(amax)));
}

namespace {

// The delayed-scaling rule with the histories kept as plain lists: the last `len` recorded amaxes
// per tensor (a skipped step records nothing), scale = pow2_floor((fp8_max 2^-margin) / amax) from
// the list's maximum or last entry when that is finite and > 0, else the previous scale.
struct ListHistory {
  std::vector<float> amaxes;
  float scale = 1.0f;
  void record(float amax, size_t len, bool most_recent, float fmax, int margin) {
    amaxes.push_back(amax);
    if (amaxes.size() > len) amaxes.erase(amaxes.begin());
    float a = 0.0f;
    for (float v : amaxes) a = std::fmax(a, v);
    if (most_recent) a = amax;
    if (std::isfinite(a) && a > 0.0f) scale = pow2_floor(fmax * std::ldexp(1.0f, -margin) / a);
  }
};

}  // namespace

TEST_CASE("fp8: the step's update follows the delayed-scaling rule per tensor, skipped steps record nothing",
          "[fp8][scaling]") {
  const int n = 3;
  const float fmax[n] = {kFp8E4M3Max, kFp8E4M3Max, kFp8E5M2Max};
  for (int len : {1, 5, 16}) {
    for (AmaxAlgo algo : {AmaxAlgo::Max, AmaxAlgo::MostRecent}) {
      for (int margin : {0, 2}) {
        INFO("history " << len << (algo == AmaxAlgo::Max ? " max" : " most recent") << " margin " << margin);
        Fp8Params p;
        p.history = len, p.algo = algo, p.margin = margin;
        std::vector<float> scales(n, 1.0f), history(size_t(n * len), 0.0f);
        Fp8Meta meta;
        ListHistory ref[n];
        Rng rng(uint64_t(len * 10 + margin));
        size_t wrong = 0, moved = 0, skipped = 0;
        for (int step = 0; step < 200; ++step) {
          int32_t words[n];
          float amax[n];
          for (int t = 0; t < n; ++t) {
            amax[t] = std::ldexp(float(rng.uniform()) + 0.5f, int(rng.below(50)) - 30);
            if (rng.below(25) == 0) amax[t] = 0.0f;
            words[t] = amax_bits(amax[t]);
          }
          const bool skip = rng.below(10) == 0;
          const std::vector<float> before = scales;
          int32_t kept[n] = {-1, -1, -1};  // a skipped step's words, for the skip report
          fp8_update(scales.data(), fmax, history.data(), &meta, words, n, p, skip, nullptr, kept);
          skipped += skip;
          for (int t = 0; t < n; ++t) wrong += kept[t] != (skip ? words[t] : -1);
          for (int t = 0; t < n; ++t) {
            if (!skip) ref[t].record(amax[t], size_t(len), algo == AmaxAlgo::MostRecent, fmax[t], margin);
            wrong += scales[size_t(t)] != ref[t].scale;
            moved += scales[size_t(t)] != before[size_t(t)];
            if (skip) wrong += scales[size_t(t)] != before[size_t(t)];
          }
        }
        CHECK(wrong == 0);
        CHECK(moved > 30);
        CHECK(meta.recorded == int32_t(200 - skipped));
      }
    }
  }
  SECTION("scaling none keeps every scale at 1 and still records the amaxes") {
    Fp8Params p;
    p.delayed = false, p.history = 4;
    std::vector<float> scales(n, 1.0f), history(size_t(n * 4), 0.0f);
    Fp8Meta meta;
    const int32_t words[n] = {amax_bits(3.0f), amax_bits(0.01f), amax_bits(1e-6f)};
    fp8_update(scales.data(), fmax, history.data(), &meta, words, n, p, false);
    CHECK(scales == std::vector<float>(n, 1.0f));
    CHECK(history[0] == 3.0f);
    CHECK(history[4] == 0.01f);
    CHECK(meta.newest == 0);
  }
}

namespace {

std::vector<uint16_t> bf16_random(size_t n, uint64_t seed, double sd) {
  Rng rng(seed);
  std::vector<uint16_t> v(n);
  for (auto& b : v) b = float_to_bf16_bits(float(sd * rng.normal()));
  return v;
}

// The spec-quantized copy of a BF16 tensor.
std::vector<uint16_t> spec_quantized(const std::vector<uint16_t>& v, float scale, Fp8 f) {
  std::vector<uint16_t> q(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    q[i] = float_to_bf16_bits(fp8_quantized(bf16_bits_to_float(v[i]), scale, 1.0f / scale, f));
  return q;
}

}  // namespace

TEST_CASE("fp8: the linear layers' FP8 seam is the compute-dtype op on quantized operands", "[fp8][linear]") {
  cpu::CpuOps ops;
  const size_t B = 37, in = 48, out = 20;
  const DType t = DType::BF16;
  auto x = bf16_random(B * in, 1, 2.0), w = bf16_random(out * in, 2, 0.05), b = bf16_random(out, 3, 0.1);
  auto dy = bf16_random(B * out, 4, 1e-4);
  dy[7] = float_to_bf16_bits(1e-14f);  // below half E5M2's smallest subnormal at the scale below: flushed
  // Three tensors per layer: input, weight, grad_output (scales as delayed scaling leaves them).
  std::vector<float> scales = {32.0f, 4096.0f, std::ldexp(1.0f, 24)};
  std::vector<float> inv = {1.0f / 32.0f, 1.0f / 4096.0f, std::ldexp(1.0f, -24)};
  std::vector<int32_t> amax(3, 0);
  std::vector<int64_t> counts(9, 0);
  LinearLayers lin(ops, t);
  REQUIRE(lin.add("fc1") == 0);
  const auto names = lin.fp8_tensors();
  REQUIRE(names.size() == 3);
  CHECK(names[2].name == "fc1.grad_output");
  CHECK(names[2].format == Fp8::E5M2);
  std::vector<uint16_t> qx(B * in), qw(out * in), qdy(B * out);
  lin.set_scratch(qx.data(), qw.data(), qdy.data());
  const auto T = [&](std::vector<uint16_t>& v, size_t r, size_t c) { return Tensor{v.data(), t, r, c}; };

  // Unbound: the plain op, bit for bit.
  std::vector<uint16_t> y_plain(B * out), y_lin(B * out);
  ops.linear_forward(T(x, B, in), T(w, out, in), T(b, 1, out), T(y_plain, B, out));
  lin.forward(0, T(x, B, in), T(w, out, in), T(b, 1, out), T(y_lin, B, out), true);
  CHECK(y_lin == y_plain);

  lin.bind(Fp8Binding{scales.data(), inv.data(), amax.data(), counts.data(), false, {}});
  REQUIRE(lin.fp8());
  auto xq = spec_quantized(x, scales[0], Fp8::E4M3), wq = spec_quantized(w, scales[1], Fp8::E4M3);
  auto dyq = spec_quantized(dy, scales[2], Fp8::E5M2);
  CHECK(xq != x);  // the quantization changed the operands: the comparison below is not trivial
  lin.forward(0, T(x, B, in), T(w, out, in), T(b, 1, out), T(y_lin, B, out), true);
  ops.linear_forward(T(xq, B, in), T(wq, out, in), T(b, 1, out), T(y_plain, B, out));
  CHECK(y_lin == y_plain);
  int32_t ax = 0, aw = 0, ady = 0;
  for (auto v : x) ax = std::max(ax, amax_bits(bf16_bits_to_float(v)));
  for (auto v : w) aw = std::max(aw, amax_bits(bf16_bits_to_float(v)));
  for (auto v : dy) ady = std::max(ady, amax_bits(bf16_bits_to_float(v)));
  CHECK(amax[0] == ax);
  CHECK(amax[1] == aw);
  CHECK(counts[0] == int64_t(B * in));

  // Backward: dw from quantized dy and x; db from the unquantized dy (row_sum); dx from quantized dy and w.
  std::vector<uint16_t> dw(out * in), db(out), dw_ref(out * in), db_ref(out), db_plain(out), dx(B * in), dx_ref(B * in);
  lin.backward_weight(0, T(dy, B, out), T(x, B, in), T(dw, out, in), T(db, 1, out));
  ops.linear_backward_weight(T(dyq, B, out), T(xq, B, in), T(dw_ref, out, in), T(db_ref, 1, out));
  ops.row_sum(RowSumArgs{dy.data(), t, int64_t(B), int64_t(out), int64_t(out), db_plain.data(), t});
  CHECK(dw == dw_ref);
  CHECK(db == db_plain);
  CHECK(amax[2] == ady);
  CHECK(counts[7] >= 1);  // dy[7] flushed to zero
  lin.backward_input(0, T(dy, B, out), T(w, out, in), T(dx, B, in));
  ops.linear_backward_input(T(dyq, B, out), T(wq, out, in), T(dx_ref, B, in));
  CHECK(dx == dx_ref);
  CHECK_THROWS(lin.backward_input(0, T(dy, B, out), T(w, out, in), T(dx, B, in)));  // its dy was used up

  // A forward outside a training step records nothing.
  std::fill(amax.begin(), amax.end(), 0);
  lin.forward(0, T(x, B, in), T(w, out, in), T(b, 1, out), T(y_lin, B, out), false);
  CHECK(amax == std::vector<int32_t>(3, 0));

  // An infinite output gradient reaches the weight gradient (the overflow check skips the step).
  dy[3] = float_to_bf16_bits(kInf);
  lin.backward_weight(0, T(dy, B, out), T(x, B, in), T(dw, out, in), T(db, 1, out));
  bool nonfinite = false;
  for (auto v : dw) nonfinite |= !std::isfinite(bf16_bits_to_float(v));
  CHECK(nonfinite);
  CHECK(amax_from_bits(amax[2]) == kInf);
}

TEST_CASE("fp8: codes and their transpose are the specification's, the FP8 GEMM equals a double reference",
          "[fp8][ops]") {
  cpu::CpuOps ops;
  const int64_t rows = 48, cols = 80;
  const std::vector<float> v = hostile_values(size_t(rows * cols), 9);
  for (Fp8 f : {Fp8::E4M3, Fp8::E5M2}) {
    const float scale = 0x1p4f;
    std::vector<uint8_t> codes(v.size()), codes_t(v.size());
    int32_t amax = 0;
    int64_t counts[3] = {0, 0, 0};
    Fp8CastArgs a;
    a.src = v.data(), a.src_type = DType::F32, a.rows = rows, a.cols = cols, a.format = f, a.scale = &scale;
    a.codes = codes.data(), a.codes_t = codes_t.data(), a.amax = &amax, a.counts = counts;
    ops.fp8_cast(a);
    size_t wrong = 0, value_wrong = 0;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const float x = v[size_t(i * cols + j)];
        const uint8_t want = std::isfinite(x) ? float_to_fp8(x * scale, f, true) : float_to_fp8(x, f, false);
        wrong += codes[size_t(i * cols + j)] != want || codes_t[size_t(j * rows + i)] != want;
        // Decoded over the scale: the emulation's value (non-finite ones both non-finite).
        const float dec = fp8_to_float(want, f) / scale, q = fp8_quantized(x, scale, 1.0f / scale, f);
        value_wrong += std::isfinite(x) ? !same_bits_or_nan(dec, q) : std::isfinite(dec);
      }
    CHECK(wrong == 0);
    CHECK(value_wrong == 0);
    CHECK(counts[0] == rows * cols);
    CHECK(counts[1] > 0);
  }
  // The GEMM: C = A B^T / (sa sb) + bias from codes, against double sums of the decoded values.
  const int64_t m = 32, n = 48, k = 64;
  Rng rng(4);
  std::vector<uint8_t> A(size_t(m * k)), B(size_t(n * k));
  for (auto& c : A) c = uint8_t(rng.below(256)) & 0xf7u;  // no NaN codes (E4M3's S.1111.111)
  for (auto& c : B) c = uint8_t(rng.below(120));          // finite, positive E5M2
  const float sa = 0x1p3f, sb = 0x1p-2f, ia = 1.0f / sa, ib = 1.0f / sb;
  std::vector<uint16_t> bias(static_cast<size_t>(n)), C(static_cast<size_t>(m * n));
  for (auto& b : bias) b = float_to_bf16_bits(float(rng.normal()));
  Fp8GemmArgs g;
  g.m = m, g.n = n, g.k = k, g.a = A.data(), g.a_format = Fp8::E4M3, g.b = B.data(), g.b_format = Fp8::E5M2;
  g.a_scale = &sa, g.b_scale = &sb, g.a_inv_scale = &ia, g.b_inv_scale = &ib, g.bias = bias.data(), g.c = C.data();
  ops.fp8_gemm(g);
  double worst = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, mag = 0;
      for (int64_t l = 0; l < k; ++l) {
        const double p = double(fp8_to_float(A[size_t(i * k + l)], Fp8::E4M3)) * fp8_to_float(B[size_t(j * k + l)], Fp8::E5M2);
        s += p, mag += std::fabs(p);
      }
      const double want = s / (double(sa) * sb) + bf16_bits_to_float(bias[size_t(j)]);
      const double got = bf16_bits_to_float(C[size_t(i * n + j)]);
      worst = std::max(worst, std::fabs(got - want) / (mag / (double(sa) * sb) + std::fabs(want) + 1e-30));
    }
  CHECK(worst < 0x1p-8);  // one BF16 rounding of C (the FP32 sum's error is far below)
  g.b_format = Fp8::E5M2, g.a_format = Fp8::E5M2;
  CHECK_THROWS(ops.fp8_gemm(g));
}

TEST_CASE("fp8: the linear layers' native FP8 path (codes, transposes, FP8 GEMMs) computes the emulation's values",
          "[fp8][linear]") {
  cpu::CpuOps ops;  // the CPU twins of fp8_cast and fp8_gemm: the GPU path's plumbing, checked here
  const size_t B = 32, in = 48, out = 64;
  const DType t = DType::BF16;
  auto x = bf16_random(B * in, 11, 2.0), w = bf16_random(out * in, 12, 0.05), b = bf16_random(out, 13, 0.1);
  auto dy = bf16_random(B * out, 14, 1e-4);
  const std::vector<float> scales = {32.0f, 4096.0f, std::ldexp(1.0f, 24)};
  const std::vector<float> inv = {1.0f / 32.0f, 1.0f / 4096.0f, std::ldexp(1.0f, -24)};
  const auto T = [&](std::vector<uint16_t>& v, size_t r, size_t c) { return Tensor{v.data(), t, r, c}; };
  struct Out {
    std::vector<uint16_t> y, dw, db, dx;
    std::vector<int32_t> amax;
    std::vector<int64_t> counts;
  };
  const auto run = [&](bool native) {
    Out o{std::vector<uint16_t>(B * out), std::vector<uint16_t>(out * in), std::vector<uint16_t>(out),
          std::vector<uint16_t>(B * in), std::vector<int32_t>(3, 0), std::vector<int64_t>(9, 0)};
    LinearLayers lin(ops, t);
    lin.add("fc1");
    std::vector<uint16_t> qx(B * in), qw(out * in), qdy(B * out);
    lin.set_scratch(qx.data(), qw.data(), qdy.data());
    Fp8Binding bind{scales.data(), inv.data(), o.amax.data(), o.counts.data(), false, {}};
    bind.native_gemm = native;
    lin.bind(bind);
    REQUIRE(lin.native(B, in, out) == native);
    lin.forward(0, T(x, B, in), T(w, out, in), T(b, 1, out), T(o.y, B, out), true);
    lin.backward_weight(0, T(dy, B, out), T(x, B, in), T(o.dw, out, in), T(o.db, 1, out));
    lin.backward_input(0, T(dy, B, out), T(w, out, in), T(o.dx, B, in));
    return o;
  };
  const Out e = run(false), n = run(true);
  CHECK(n.y == e.y);  // forward: the same op on the same values
  CHECK(n.db == e.db);
  CHECK(n.amax == e.amax);
  CHECK(n.counts == e.counts);
  // dw and dx: the same products summed in another layout's order (one BF16 rounding apart at most).
  const auto close = [](const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
    size_t bad = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const float x = bf16_bits_to_float(a[i]), y = bf16_bits_to_float(b[i]);
      bad += std::fabs(x - y) > 0x1p-7f * std::fabs(y) + 1e-30f;
    }
    return bad;
  };
  CHECK(close(n.dw, e.dw) == 0);
  CHECK(close(n.dx, e.dx) == 0);
  size_t nonzero = 0;
  for (auto v : n.dw) nonzero += bf16_bits_to_float(v) != 0.0f;
  CHECK(nonzero > n.dw.size() / 2);
}
