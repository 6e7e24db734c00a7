// The fused causal attention on the CPU (backend/attention_args.h, src/backend/cpu/ops_attention.cpp),
// on seeded random data (never zeros):
// - every kernel set this CPU has (AVX2, AVX-512, AVX-512-BF16) gives the scalar specification's
//   bits, forward and backward, at head dimensions and lengths that are and are not multiples of
//   the vector width and of the 64-key tile, in the natural and in BF16's pair order (the native
//   BF16 products where the inputs allow them; the test says which instruction sets it ran);
// - the op on BF16 inputs against the scalar specification, bit for bit, natively where allowed;
// - the op in the QKV layout against a float64 reference of softmax(QK^T * scale) V and its
//   gradients, for F32, F16 and BF16 (FP32 error plus one rounding to the output's dtype);
// - the causal mask: keys after a query are never read; non-finite values make their rows NaN;
// - the paths that round P and dS to BF16 (the matmul on AMX, the kernels' BF16 products on
//   AVX-512-BF16) within that rounding of the float64 reference, the same bits at any thread count;
//   the BF16 products only for heads whose inputs allow them (the others the specification's bits);
// - the same bits on 1 and 2 OpenMP threads; invalid arguments refused.
// The model-level checks (fused attention against the float64 PyTorch GPT, recomputation) are in
// test_gpt.cpp; the CUDA twin's bit-identity in tests/gpu/test_ops_transformer.cpp.
#include <catch2/catch.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "attention_ref.h"
#include "backend/attention_args.h"
#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "core/half.h"
#include "core/rng.h"
// GCC 12 reports a false -Wstringop-overflow inside Raw::set_bits when fill_bits is inlined here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#include "ops_general_ref.h"
#pragma GCC diagnostic pop

using namespace amp;
using ops_ref::Raw;

namespace {

bool same_bits(float a, float b) { return f32_bits(a) == f32_bits(b) || (std::isnan(a) && std::isnan(b)); }

// Counts the elements of got[] that differ from want[] in their bits, remembering the first.
struct BitCheck {
  size_t differ = 0, checked = 0;
  std::string first;
  void check(const char* what, const float* got, const float* want, size_t n) {
    for (size_t i = 0; i < n; ++i, ++checked)
      if (!same_bits(got[i], want[i]) && differ++ == 0) {
        std::ostringstream o;
        o << what << "[" << i << "] " << got[i] << " vs " << want[i];
        first = o.str();
      }
  }
};

struct HeadData {
  int64_t T, D, Dp, Tp;
  std::vector<float> q, k, kt, v, vt, dout;
  HeadData(int64_t T_, int64_t D_, uint64_t seed) : T(T_), D(D_) {
    Dp = (D + cpu::kAttnPad - 1) / cpu::kAttnPad * cpu::kAttnPad;
    Tp = (T + kAttnKeyTile - 1) / kAttnKeyTile * kAttnKeyTile + (T % 2 ? 16 : 0);  // the op pads the stride
    q.assign(size_t(T * Dp), 0.0f), k = q, v = q, dout = q;
    kt.assign(size_t(D * Tp), 0.0f), vt = kt;
    Rng rng(seed);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) {
        q[size_t(t * Dp + d)] = float(2.0 * rng.normal());
        k[size_t(t * Dp + d)] = kt[size_t(d * Tp + t)] = float(2.0 * rng.normal());
        v[size_t(t * Dp + d)] = vt[size_t(d * Tp + t)] = float(rng.normal());
        dout[size_t(t * Dp + d)] = float(rng.normal());
      }
  }
};

// A head of BF16 inputs for the pair order (AttnHead::pair_dots): the values rounded to BF16, and
// their BF16 forms for the native kernels (rows of Q and dO, pairs of K and V).
struct Bf16Head {
  std::vector<uint16_t> q16, dout16;
  std::vector<uint32_t> kp, vp;
  bool q_ok = false, k_ok = false, v_ok = false, dout_ok = false;  // cpu::bf16_dots_allowed
  explicit Bf16Head(HeadData& x) {
    const auto round = [](std::vector<float>& a) {
      for (float& f : a) f = bf16_bits_to_float(float_to_bf16_bits(f));
    };
    for (auto* a : {&x.q, &x.k, &x.kt, &x.v, &x.vt, &x.dout}) round(*a);
    const auto bits = [&](const std::vector<float>& a) {
      std::vector<uint16_t> b(a.size());
      for (size_t i = 0; i < a.size(); ++i) b[i] = float_to_bf16_bits(a[i]);
      return b;
    };
    const auto pairs = [&](const std::vector<uint16_t>& rows) {
      std::vector<uint32_t> p(size_t(x.Dp / 2 * x.Tp), 0u);
      for (int64_t t = 0; t < x.T; ++t)
        for (int64_t d = 0; d + 1 < x.D; d += 2)
          p[size_t(d / 2 * x.Tp + t)] = rows[size_t(t * x.Dp + d)] | uint32_t(rows[size_t(t * x.Dp + d + 1)]) << 16;
      return p;
    };
    q16 = bits(x.q), dout16 = bits(x.dout);
    const std::vector<uint16_t> k16 = bits(x.k), v16 = bits(x.v);
    kp = pairs(k16), vp = pairs(v16);
    const int64_t n = x.T * x.Dp;
    q_ok = cpu::bf16_dots_allowed(q16.data(), n), k_ok = cpu::bf16_dots_allowed(k16.data(), n);
    v_ok = cpu::bf16_dots_allowed(v16.data(), n), dout_ok = cpu::bf16_dots_allowed(dout16.data(), n);
  }
};

struct HeadResult {
  std::vector<float> out, m, l, delta, dq, dk, dv;
};

// One head through a kernel set; with bf16 the pair order, and the native products where the
// kernel set has them, D is even and the inputs allow them (as the op decides).
HeadResult run_head(const cpu::AttnKernels& kern, const HeadData& x, const Bf16Head* bf16 = nullptr) {
  HeadResult r;
  const size_t rows = size_t(x.T * x.Dp), T = size_t(x.T);
  r.out.assign(rows, 0.0f), r.m.assign(T, 0.0f), r.l.assign(T, 0.0f);
  cpu::AttnHead h;
  h.T = x.T, h.D = x.D, h.Dp = x.Dp, h.Tp = x.Tp, h.scale = 1.0f / std::sqrt(float(x.D));
  h.q = x.q.data(), h.k = x.k.data(), h.kt = x.kt.data(), h.v = x.v.data(), h.vt = x.vt.data();
  h.out = r.out.data(), h.m_out = r.m.data(), h.l_out = r.l.data();
  if (bf16) {
    h.pair_dots = true;
    if (kern.bf16_dots && x.D % 2 == 0 && bf16->q_ok && bf16->k_ok) h.q16 = bf16->q16.data(), h.kp16 = bf16->kp.data();
    if (kern.bf16_dots && x.D % 2 == 0 && bf16->dout_ok && bf16->v_ok)
      h.dout16 = bf16->dout16.data(), h.vp16 = bf16->vp.data();
  }
  kern.forward(h);
  // The backward reads the forward's output as rounded storage would give it back: here FP32.
  r.delta.assign(T, 0.0f), r.dq.assign(rows, 0.0f), r.dk.assign(rows, 0.0f), r.dv.assign(rows, 0.0f);
  h.o = r.out.data(), h.dout = x.dout.data(), h.m = r.m.data(), h.l = r.l.data(), h.delta = r.delta.data();
  h.dq = r.dq.data(), h.dk = r.dk.data(), h.dv = r.dv.data();
  kern.backward(h);
  // Only the first D columns are outputs.
  for (auto* a : {&r.out, &r.dq, &r.dk, &r.dv})
    for (int64_t t = 0; t < x.T; ++t)
      for (int64_t d = x.D; d < x.Dp; ++d) (*a)[size_t(t * x.Dp + d)] = 0.0f;
  return r;
}

// max over elements of |got - want| / (atol_rel * max|want| + rtol * |want|) must stay <= 1.
void compare(const std::string& what, const std::vector<float>& got, const std::vector<double>& want, double rtol,
             double atol_rel) {
  double maxabs = 0;
  for (double w : want) maxabs = std::max(maxabs, std::fabs(w));
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = std::fabs(double(got[i]) - want[i]) / (atol_rel * maxabs + rtol * std::fabs(want[i]) + 1e-300);
    if (!(e <= worst)) worst = e, at = i;
  }
  INFO(what << ": worst element " << at << " got " << got[at] << " want " << want[at] << " (max |want| " << maxabs
            << ", ratio " << worst << ")");
  CHECK(worst <= 1.0);
}

struct OpCase {
  int64_t B, T, H, D;
  DType type;
  Raw qkv, dout;
  OpCase(int64_t B_, int64_t T_, int64_t H_, int64_t D_, DType t, uint64_t seed)
      : B(B_), T(T_), H(H_), D(D_), type(t), qkv(t, size_t(B_ * T_ * 3 * H_ * D_)), dout(t, size_t(B_ * T_ * H_ * D_)) {
    ops_ref::fill_random(qkv, seed, 1.5);
    ops_ref::fill_random(dout, seed + 1);
  }
  float scale() const { return 1.0f / std::sqrt(float(D)); }
};

struct OpResult {
  Raw out, dqkv;
  std::vector<float> row_max, row_sum, delta;
};

OpResult run_op(cpu::CpuOps& ops, const OpCase& c) {
  OpResult r;
  const size_t rows = size_t(c.B * c.H * c.T);
  r.out = Raw(c.type, size_t(c.B * c.T * c.H * c.D));
  r.out.fill_bits(ops_ref::sentinel_bits(c.type));
  r.dqkv = Raw(c.type, c.qkv.size());
  r.dqkv.fill_bits(ops_ref::sentinel_bits(c.type));
  r.row_max.assign(rows, NAN), r.row_sum.assign(rows, NAN), r.delta.assign(rows, NAN);
  AttentionArgs a;
  a.B = c.B, a.T = c.T, a.H = c.H, a.D = c.D, a.scale = c.scale(), a.type = c.type;
  a.qkv = c.qkv.data(), a.out = r.out.data(), a.row_max = r.row_max.data(), a.row_sum = r.row_sum.data();
  ops.attention_forward(a);
  AttentionBackwardArgs g;
  g.B = c.B, g.T = c.T, g.H = c.H, g.D = c.D, g.scale = c.scale(), g.type = c.type;
  g.qkv = c.qkv.data(), g.out = r.out.data(), g.dout = c.dout.data();
  g.row_max = r.row_max.data(), g.row_sum = r.row_sum.data(), g.delta = r.delta.data(), g.dqkv = r.dqkv.data();
  ops.attention_backward(g);
  return r;
}

}  // namespace

TEST_CASE("attention: every kernel set of this CPU gives the scalar specification's bits", "[attention]") {
  const auto& ks = cpu::available_attention_kernels();
  REQUIRE(std::string(ks.front().isa) == "scalar");
  std::string ran;
  for (const auto& k : ks) ran += std::string(ran.empty() ? "" : ", ") + k.isa;
  WARN("attention kernels checked against the scalar specification: " << ran << " (active: "
                                                                       << cpu::active_attention_kernels().isa << ")");
#if defined(__x86_64__)
  __builtin_cpu_init();
  CHECK((ks.size() >= 2) == (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")));
  CHECK((ks.size() >= 3) == (ks.size() >= 2 && __builtin_cpu_supports("avx512f")));
  // The native BF16 set wherever the CPU has the instruction and it computes the specification's
  // pair (the probe); a CPU where it does not runs the FP32 chains, said here.
  const bool bf16_set = std::string(ks.back().isa) == "avx512bf16";
  if (ks.size() >= 3 && __builtin_cpu_supports("avx512bf16") && !bf16_set) {
    WARN("this CPU's VDPBF16PS does not compute fma(x0, y0, fma(x1, y1, a)): native BF16 products off");
    CHECK_FALSE(cpu::bf16_dot_pairs_match());
  } else {
    CHECK(bf16_set == (ks.size() >= 3 && __builtin_cpu_supports("avx512bf16")));
  }
#endif
  struct Shape {
    int64_t T, D;
  };
  const Shape shapes[] = {{1, 1}, {5, 7}, {8, 16}, {63, 16}, {64, 64}, {65, 13}, {130, 32}, {200, 80}, {97, 33}};
  uint64_t seed = 300;
  // Natural order (F32, F16), then BF16 inputs in the pair order: natively where the set has
  // BF16 products; the special values keep their heads off the native products (as in the op),
  // a head of tiny values (below 2^-55) too.
  for (const bool pair : {false, true})
  for (const Shape& s : shapes) {
    HeadData x(s.T, s.D, ++seed);
    if (s.T > 20 && (!pair || s.T % 2)) {  // special values: a NaN query element, an infinite key element late
      x.q[size_t(11 * x.Dp + 0)] = NAN;
      x.k[size_t((s.T - 3) * x.Dp + 1)] = x.kt[size_t(1 * x.Tp + s.T - 3)] = INFINITY;
    }
    if (pair && s.T == 130) x.k[size_t(5 * x.Dp + 2)] = x.kt[size_t(2 * x.Tp + 5)] = 1e-20f;
    const Bf16Head* bf16 = nullptr;
    std::unique_ptr<Bf16Head> keep;
    if (pair) keep = std::make_unique<Bf16Head>(x), bf16 = keep.get();
    const HeadResult want = run_head(ks.front(), x, bf16);
    for (size_t i = 1; i < ks.size(); ++i) {
      const HeadResult got = run_head(ks[i], x, bf16);
      BitCheck b;
      b.check("out", got.out.data(), want.out.data(), want.out.size());
      b.check("row_max", got.m.data(), want.m.data(), want.m.size());
      b.check("row_sum", got.l.data(), want.l.data(), want.l.size());
      b.check("delta", got.delta.data(), want.delta.data(), want.delta.size());
      b.check("dq", got.dq.data(), want.dq.data(), want.dq.size());
      b.check("dk", got.dk.data(), want.dk.data(), want.dk.size());
      b.check("dv", got.dv.data(), want.dv.data(), want.dv.size());
      INFO(ks[i].isa << (pair ? " pair order" : "") << " T " << s.T << " D " << s.D << ": " << b.differ << " of "
                     << b.checked << " differ; " << b.first);
      CHECK(b.differ == 0);
    }
  }
}

TEST_CASE("attention: forward and backward against the float64 reference in every dtype", "[attention]") {
  cpu::CpuOps ops;
  ops.set_exact_attention(true);  // the specification's kernels (the BF16 matmul path: below)
  struct Shape {
    int64_t B, T, H, D;
  };
  const Shape shapes[] = {{1, 1, 1, 4}, {2, 33, 3, 8}, {2, 70, 2, 20}, {1, 130, 2, 64}};
  uint64_t seed = 400;
  for (const Shape& s : shapes)
    for (const DType t : {DType::F32, DType::F16, DType::BF16}) {
      const OpCase c(s.B, s.T, s.H, s.D, t, seed += 2);
      const OpResult r = run_op(ops, c);
      const int64_t C = s.H * s.D;
      // Per (b, h): the reference from the stored (rounded) inputs, compared in the op's layout.
      const double ulp = ops_ref::unit_roundoff(t) * 2.0;  // one rounding of the output
      const double rtol = t == DType::F32 ? 1e-5 : ulp, atol_rel = 2e-6 * std::sqrt(double(s.T)) + 1e-6;
      std::vector<double> want_out, want_dq, want_dk, want_dv;
      std::vector<float> got_out, got_dq, got_dk, got_dv;
      for (int64_t b = 0; b < s.B; ++b)
        for (int64_t h = 0; h < s.H; ++h) {
          std::vector<double> q, k, v, dout;
          for (int64_t i = 0; i < s.T; ++i)
            for (int64_t d = 0; d < s.D; ++d) {
              const size_t row = size_t((b * s.T + i) * 3 * C);
              q.push_back(c.qkv.get(row + size_t(h * s.D + d)));
              k.push_back(c.qkv.get(row + size_t(C + h * s.D + d)));
              v.push_back(c.qkv.get(row + size_t(2 * C + h * s.D + d)));
              dout.push_back(c.dout.get(size_t((b * s.T + i) * C + h * s.D + d)));
              got_out.push_back(r.out.get(size_t((b * s.T + i) * C + h * s.D + d)));
              got_dq.push_back(r.dqkv.get(row + size_t(h * s.D + d)));
              got_dk.push_back(r.dqkv.get(row + size_t(C + h * s.D + d)));
              got_dv.push_back(r.dqkv.get(row + size_t(2 * C + h * s.D + d)));
            }
          // The backward's dP uses the rounded output (delta = dout . out): the reference of the
          // gradients is that of the exact softmax; the difference is within the output's rounding.
          const attention_ref::Head ref = attention_ref::reference_head(q, k, v, dout, s.T, s.D, double(c.scale()));
          want_out.insert(want_out.end(), ref.out.begin(), ref.out.end());
          want_dq.insert(want_dq.end(), ref.dq.begin(), ref.dq.end());
          want_dk.insert(want_dk.end(), ref.dk.begin(), ref.dk.end());
          want_dv.insert(want_dv.end(), ref.dv.begin(), ref.dv.end());
        }
      INFO(dtype_name(t) << " B " << s.B << " T " << s.T << " H " << s.H << " D " << s.D);
      compare("out", got_out, want_out, rtol, atol_rel);
      compare("dv", got_dv, want_dv, rtol, atol_rel);
      // dq and dk depend on delta = dout . out with the output rounded to the dtype: a 16-bit output
      // adds its half-ulp error, scaled by the gradient's sums, to every term.
      const double g_atol = t == DType::F32 ? atol_rel : ulp;
      compare("dq", got_dq, want_dq, rtol, g_atol);
      compare("dk", got_dk, want_dk, rtol, g_atol);
      for (size_t i = 0; i < r.row_sum.size(); ++i) {  // every statistic written, the sums at least 1
        REQUIRE(std::isfinite(r.row_max[i]));
        REQUIRE(r.row_sum[i] >= 1.0f);
      }
    }
}

TEST_CASE("attention: BF16 heads follow the specification's pair order through the op, natively where allowed",
          "[attention]") {
  // The op on BF16 inputs against the scalar specification run on the same (widened) heads: every
  // output bit, with the forward's rounded output feeding the backward as in the op. One head
  // holds a key below 2^-55 (no native score products for it) and another a value (no native dP
  // product: its V is then widened and transposed, the others' are not); the natural order must
  // differ somewhere (else this test could not tell the orders apart).
  cpu::CpuOps ops;
  ops.set_exact_attention(true);
  const int64_t B = 2, T = 70, H = 2, D = 20, C = H * D;
  OpCase c(B, T, H, D, DType::BF16, 31);
  c.qkv.set(size_t((1 * T + 9) * 3 * C + C + 1 * D + 4), 3e-20f);       // a key of sequence 1, head 1
  c.qkv.set(size_t((0 * T + 17) * 3 * C + 2 * C + 0 * D + 3), 3e-20f);  // a value of sequence 0, head 0
  const int64_t before = cpu::attention_native_bf16_products();
  const OpResult r = run_op(ops, c);
  const int64_t native = cpu::attention_native_bf16_products() - before;
  const bool has_native = cpu::active_attention_kernels().bf16_dots;
  INFO("native products " << native << " (kernels " << cpu::active_attention_kernels().isa << ")");
  // 4 heads: 4 score products forward, 4 score and 4 dP products backward; the tiny key's head
  // runs its 2 score products in FP32 FMAs, the tiny value's head its dP product.
  CHECK(native == (has_native ? 9 : 0));
  const cpu::AttnKernels& spec = cpu::available_attention_kernels().front();
  size_t differ_natural = 0;
  BitCheck bits;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      HeadData x(T, D, 1);  // shapes and padding; the values are the op's
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d) {
          const size_t row = size_t((b * T + t) * 3 * C), e = size_t(t * x.Dp + d);
          x.q[e] = c.qkv.get(row + size_t(h * D + d));
          x.k[e] = x.kt[size_t(d * x.Tp + t)] = c.qkv.get(row + size_t(C + h * D + d));
          x.v[e] = x.vt[size_t(d * x.Tp + t)] = c.qkv.get(row + size_t(2 * C + h * D + d));
          x.dout[e] = c.dout.get(size_t((b * T + t) * C + h * D + d));
        }
      for (const bool pair : {true, false}) {
        // Forward, the output rounded to BF16, then backward from it.
        std::vector<float> out(size_t(T * x.Dp), 0.0f), o(out.size(), 0.0f), m(static_cast<size_t>(T)), l(static_cast<size_t>(T));
        std::vector<float> delta(static_cast<size_t>(T)), dq(out.size()), dk(out.size()), dv(out.size());
        cpu::AttnHead a;
        a.T = T, a.D = D, a.Dp = x.Dp, a.Tp = x.Tp, a.scale = c.scale(), a.pair_dots = pair;
        a.q = x.q.data(), a.k = x.k.data(), a.kt = x.kt.data(), a.v = x.v.data(), a.vt = x.vt.data();
        a.out = out.data(), a.m_out = m.data(), a.l_out = l.data();
        spec.forward(a);
        for (size_t i = 0; i < out.size(); ++i) o[i] = bf16_bits_to_float(float_to_bf16_bits(out[i]));
        a.o = o.data(), a.dout = x.dout.data(), a.m = m.data(), a.l = l.data(), a.delta = delta.data();
        a.dq = dq.data(), a.dk = dk.data(), a.dv = dv.data();
        spec.backward(a);
        std::vector<float> got, want;
        for (int64_t t = 0; t < T; ++t)
          for (int64_t d = 0; d < D; ++d) {
            const size_t row = size_t((b * T + t) * 3 * C), e = size_t(t * x.Dp + d);
            got.insert(got.end(), {r.out.get(size_t((b * T + t) * C + h * D + d)), r.dqkv.get(row + size_t(h * D + d)),
                                   r.dqkv.get(row + size_t(C + h * D + d)), r.dqkv.get(row + size_t(2 * C + h * D + d))});
            for (const float w : {o[e], dq[e], dk[e], dv[e]}) want.push_back(bf16_bits_to_float(float_to_bf16_bits(w)));
          }
        const size_t n = size_t(b * H + h) * size_t(T);
        if (pair) {
          bits.check("out, dq, dk, dv", got.data(), want.data(), got.size());
          bits.check("row_max", r.row_max.data() + n, m.data(), size_t(T));
          bits.check("row_sum", r.row_sum.data() + n, l.data(), size_t(T));
        } else {  // the 16-bit outputs seldom show one FP32 rounding; the FP32 statistics do
          for (size_t i = 0; i < got.size(); ++i) differ_natural += !same_bits(got[i], want[i]);
          for (int64_t i = 0; i < T; ++i)
            differ_natural += !same_bits(r.row_max[n + size_t(i)], m[size_t(i)]) +
                              !same_bits(r.row_sum[n + size_t(i)], l[size_t(i)]);
        }
      }
    }
  INFO(bits.differ << " of " << bits.checked << " differ; " << bits.first);
  CHECK(bits.differ == 0);
  CHECK(differ_natural > 0);
}

TEST_CASE("attention: BF16 with P and dS rounded (the matmul on AMX, the BF16 products on AVX-512-BF16) within "
          "their rounding, the same bits at 1, 2 and 3 threads",
          "[attention]") {
  // The paths CpuOps takes for BF16 by default: oneDNN's BF16 matmul where it runs on AMX
  // (ops_attention_matmul.cpp), else the kernels' BF16 products where the CPU has AVX-512-BF16
  // (attention_pairs.h). Against the float64 reference within the bound of a path that rounds P
  // and dS to BF16 before their products (the CUDA tensor-core path's bound,
  // attention_ref::check_bound); the same bits at 1, 2 and 3 threads and on a second run; lengths
  // across the 64-query tile and odd (the row pairs' padding), head dimensions 64, 20 and 18 (pairs
  // of columns not filling a 16-column vector).
  cpu::CpuOps ops;
  if (ops.attention_exact(DType::BF16)) {
    WARN("SKIPPED: this CPU has neither AMX nor AVX-512-BF16 (kernels "
         << ops.attention_isa() << "); BF16 attention runs the specification's kernels");
    return;
  }
  const bool matmul = ops.attention_on_matmul(DType::BF16);
  WARN("BF16 attention ran on " << (matmul ? "the BF16 matmul (AMX)" : "the kernels' BF16 products (AVX-512-BF16)"));
  struct Shape {
    int64_t B, T, H, D;
  };
  const Shape shapes[] = {{1, 1, 1, 64}, {2, 37, 3, 64}, {1, 130, 2, 64}, {2, 70, 2, 20},
                          {1, 257, 1, 64}, {2, 45, 2, 18}};
  uint64_t seed = 900;
  const int threads = omp_get_max_threads();
  for (const Shape& s : shapes) {
    const OpCase c(s.B, s.T, s.H, s.D, DType::BF16, seed += 2);
    INFO("B " << s.B << " T " << s.T << " H " << s.H << " D " << s.D);
    omp_set_num_threads(1);
    const int64_t heads_before = cpu::attention_bf16_product_heads();
    const OpResult first = run_op(ops, c);
    if (!matmul) CHECK(cpu::attention_bf16_product_heads() - heads_before == 2 * s.B * s.H);  // forward, backward
    attention_ref::check_bound(s.B, s.T, s.H, s.D, c.scale(), c.qkv, c.dout, first.out, first.dqkv);
    for (size_t i = 0; i < first.row_sum.size(); ++i) {  // every statistic written, the sums at least 1
      REQUIRE(std::isfinite(first.row_max[i]));
      REQUIRE(first.row_sum[i] >= 1.0f);
    }
    for (int t : {1, 2, 3}) {
      omp_set_num_threads(t);
      const OpResult again = run_op(ops, c);
      INFO(t << " threads");
      CHECK(again.out.bytes == first.out.bytes);
      CHECK(again.dqkv.bytes == first.dqkv.bytes);
      CHECK(again.row_max == first.row_max);
      CHECK(again.row_sum == first.row_sum);
    }
  }
  omp_set_num_threads(threads);
}

TEST_CASE("attention: the BF16 products run per head where its inputs allow them, the others keep the "
          "specification's bits",
          "[attention]") {
  // A value below 2^-55 in one head (bf16_dots_allowed refuses it): that head runs the
  // specification's kernels, every output bit as with set_exact_attention(true); every other head
  // runs the BF16 products, and some of their bits differ from the specification's (the test
  // could not tell the paths apart otherwise).
  cpu::CpuOps ops;
  if (!ops.attention_bf16_products(DType::BF16)) {
    const char* matmul = ops.attention_on_matmul(DType::BF16) ? ", the matmul on AMX" : "";
    WARN("SKIPPED: BF16 attention runs no BF16 products on this CPU (kernels " << ops.attention_isa() << matmul << ")");
    return;
  }
  const int64_t B = 2, T = 75, H = 3, D = 32, C = H * D, tiny_b = 1, tiny_h = 2;
  OpCase c(B, T, H, D, DType::BF16, 61);
  c.qkv.set(size_t((tiny_b * T + 40) * 3 * C + 2 * C + tiny_h * D + 7), 3e-20f);
  const int64_t before = cpu::attention_bf16_product_heads();
  const OpResult got = run_op(ops, c);
  CHECK(cpu::attention_bf16_product_heads() - before == 2 * (B * H - 1));
  ops.set_exact_attention(true);
  const OpResult want = run_op(ops, c);
  size_t differ_elsewhere = 0, differ_tiny = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      size_t differ = 0;
      for (int64_t i = 0; i < T; ++i)
        for (int64_t d = 0; d < D; ++d) {
          const size_t o = size_t((b * T + i) * C + h * D + d), row = size_t((b * T + i) * 3 * C);
          differ += got.out.bits(o) != want.out.bits(o);
          for (int64_t part = 0; part < 3; ++part) {
            const size_t g = row + size_t(part * C + h * D + d);
            differ += got.dqkv.bits(g) != want.dqkv.bits(g);
          }
        }
      (b == tiny_b && h == tiny_h ? differ_tiny : differ_elsewhere) += differ;
    }
  CHECK(differ_tiny == 0);
  CHECK(differ_elsewhere > 0);
  CHECK(got.row_max == want.row_max);  // the forward's statistics are the specification's on either path
  CHECK(got.row_sum == want.row_sum);
}

TEST_CASE("attention: keys after a query are never read, non-finite values make rows NaN", "[attention]") {
  cpu::CpuOps ops;
  const int64_t B = 1, T = 150, H = 2, D = 16, C = H * D;
  OpCase c(B, T, H, D, DType::F32, 77);
  const OpResult clean = run_op(ops, c);
  // A NaN key of head 1 at position 100: rows of head 1 before it keep their bits, rows from it on
  // are NaN; head 0 keeps every bit. (An infinite key element makes scores of +-inf: -inf is a
  // probability of 0, as in the explicit softmax, +inf a NaN row.)
  c.qkv.set(size_t(100 * 3 * C + C + 1 * D + 3), NAN);
  // A NaN query of head 0 at position 7: that row only.
  c.qkv.set(size_t(7 * 3 * C + 0 * D + 5), NAN);
  const OpResult bad = run_op(ops, c);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t h = 0; h < H; ++h) {
      const bool nan_row = (h == 1 && i >= 100) || (h == 0 && i == 7);
      for (int64_t d = 0; d < D; ++d) {
        const size_t at = size_t(i * C + h * D + d);
        INFO("row " << i << " head " << h << " column " << d);
        if (nan_row)
          REQUIRE(std::isnan(bad.out.get(at)));
        else
          REQUIRE(bad.out.bits(at) == clean.out.bits(at));
      }
    }
}

TEST_CASE("attention: 1 and 2 OpenMP threads give the same bits, invalid arguments are refused", "[attention]") {
  cpu::CpuOps ops;
  const OpCase c(3, 90, 3, 24, DType::BF16, 5);
  const int threads = omp_get_max_threads();
  for (bool exact : {true, false}) {  // the specification's kernels; BF16 on the matmul on AMX CPUs
    ops.set_exact_attention(exact);
    INFO((exact ? "the specification's kernels" : ops.attention_on_matmul(c.type) ? "the matmul path" : "the default path"));
    omp_set_num_threads(1);
    const OpResult one = run_op(ops, c);
    omp_set_num_threads(2);
    const OpResult two = run_op(ops, c);
    omp_set_num_threads(threads);
    CHECK(one.out.bytes == two.out.bytes);
    CHECK(one.dqkv.bytes == two.dqkv.bytes);
    CHECK(one.row_max == two.row_max);
    CHECK(one.row_sum == two.row_sum);
  }
  ops.set_exact_attention(false);

  std::vector<float> buf(4096), stats(64);
  AttentionArgs a;
  a.B = 1, a.T = 4, a.H = 2, a.D = 8, a.type = DType::F32, a.qkv = buf.data(), a.out = buf.data() + 1024;
  a.row_max = stats.data(), a.row_sum = stats.data() + 32;
  ops.attention_forward(a);  // valid
  AttentionArgs bad = a;
  bad.out = const_cast<void*>(a.qkv);
  CHECK_THROWS_WITH(ops.attention_forward(bad), Catch::Contains("alias"));
  bad = a, bad.D = 2048;
  CHECK_THROWS_WITH(ops.attention_forward(bad), Catch::Contains("D <= 1024"));
  bad = a, bad.row_sum = nullptr;
  CHECK_THROWS_WITH(ops.attention_forward(bad), Catch::Contains("null pointer"));
  bad = a, bad.type = DType::I32;
  CHECK_THROWS_WITH(ops.attention_forward(bad), Catch::Contains("unsupported dtype"));
  AttentionBackwardArgs g;
  g.B = 1, g.T = 4, g.H = 2, g.D = 8, g.type = DType::F32, g.qkv = buf.data(), g.out = buf.data() + 1024;
  g.dout = buf.data() + 2048, g.row_max = stats.data(), g.row_sum = stats.data() + 32, g.delta = nullptr;
  g.dqkv = buf.data() + 3072;
  CHECK_THROWS_WITH(ops.attention_backward(g), Catch::Contains("null pointer"));
}
