// The transformer ops on the CPU (amp::cpu::CpuOps, backend/transformer_args.h), always on
// seeded random data (never zeros):
// - the analytic double-precision backward formulas against central finite differences of the
//   double forward references (tiny sizes);
// - every forward against its double reference and every backward against the double analytic
//   backward, for F32, F16 and BF16, with error bounds derived from the FP32 algorithm plus one
//   rounding to the output dtype (a few FP32 ulp of the terms' magnitude; half an ulp of a 16-bit
//   output);
// - exact specifications where the op has one (the embedding's single addition and its fixed
//   summation orders, dbeta == row_sum(dy)), the causal mask's exact zeros, never-read elements
//   holding NaN, in-place forms, accumulation flags, invalid tokens and the reserve contract;
// - determinism: two runs, and 1 and 2 OpenMP threads, give identical bits.
// The scalar functions (amp::tmath) are tested here compiled as the CPU twin compiles them: without
// contraction of a*b+c into an FMA (see src/backend/cpu/ops_transformer.cpp).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <catch2/catch.hpp>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/row_kernels.h"
#include "core/error.h"
#include "core/rng.h"
// GCC 12 reports a false -Wstringop-overflow inside Raw::set_bits when fill_bits is inlined here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#include "ops_general_ref.h"
#pragma GCC diagnostic pop

using namespace amp;
using ops_ref::Raw;

namespace {

const DType kTypes[] = {DType::F32, DType::F16, DType::BF16};
constexpr double kU = 0x1p-24;  // FP32 unit roundoff

// Random values offset by `offset` (a non-zero mean for the layer norm), stored in t, never zero.
Raw random_raw(DType t, size_t n, uint64_t seed, double scale = 1.0, double offset = 0.0) {
  Raw r(t, n);
  ops_ref::fill_random(r, seed, scale);
  if (offset != 0.0)
    for (size_t i = 0; i < n; ++i) {
      r.set(i, float(offset + r.get(i)));
      if (r.get(i) == 0.0f) r.set(i, float(offset));
    }
  return r;
}

std::vector<double> to_double(const Raw& r) {
  std::vector<double> v(r.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = r.get(i);
  return v;
}

// Elementwise comparison with a reference: |got - ref| <= err32 + u_out (|ref| + err32) + tiny_out,
// err32 the bound of the FP32 computation before the output's one rounding.
struct Close {
  DType out;
  size_t checked = 0, bad = 0;
  double worst = 0;  // largest |got - ref| / tol
  std::string first;
  explicit Close(DType t) : out(t) {}
  void operator()(double got, double ref, double err32, const std::string& where) {
    const double tol = err32 + ops_ref::unit_roundoff(out) * (std::fabs(ref) + err32) + ops_ref::tiny_of(out);
    const double d = std::fabs(got - ref);
    ++checked;
    const bool ok = std::isnan(ref) ? std::isnan(got) : d <= tol;
    if (std::isfinite(d)) worst = std::max(worst, d / tol);
    if (!ok && bad++ == 0) {
      std::ostringstream os;
      os << where << ": got " << got << ", reference " << ref << ", tolerance " << tol;
      first = os.str();
    }
  }
  std::string describe() const {
    std::ostringstream os;
    os << dtype_name(out) << ": " << bad << " of " << checked << " outside tolerance, worst " << worst << " x tol"
       << (bad ? "; first " + first : std::string());
    return os.str();
  }
};

#define TOPS_REQUIRE_CLOSE(c)  \
  do {                         \
    INFO((c).describe());      \
    REQUIRE((c).checked > 0);  \
    REQUIRE((c).bad == 0);     \
  } while (0)

// Bits equal, any NaN equal to any NaN (a NaN's payload is not specified).
bool same(float a, float b) { return (std::isnan(a) && std::isnan(b)) || f32_bits(a) == f32_bits(b); }

std::string at_index(const char* name, int64_t a, int64_t b = -1, int64_t c = -1) {
  std::ostringstream os;
  os << name << "[" << a << "]";
  if (b >= 0) os << "[" << b << "]";
  if (c >= 0) os << "[" << c << "]";
  return os.str();
}

// ---------------------------------------------------------------- double references

struct LnForwardRef {
  std::vector<double> y, err, mean, rstd, mean_err;
};

// y = (x - mean) rstd gamma + beta; err: K = ceil(C/32) + 7 covers a lane sum and its tree.
LnForwardRef ln_forward_ref(const std::vector<double>& x, const std::vector<double>& g, const std::vector<double>& b,
                            int64_t rows, int64_t C, double eps) {
  LnForwardRef r;
  r.y.resize(size_t(rows * C));
  r.err.resize(r.y.size());
  const double K = double((C + 31) / 32 + 7);
  for (int64_t i = 0; i < rows; ++i) {
    const double* xr = &x[size_t(i * C)];
    double s = 0, sa = 0;
    for (int64_t j = 0; j < C; ++j) s += xr[j], sa += std::fabs(xr[j]);
    const double mean = s / double(C);
    double v = 0;
    for (int64_t j = 0; j < C; ++j) v += (xr[j] - mean) * (xr[j] - mean);
    const double rstd = 1.0 / std::sqrt(v / double(C) + eps);
    const double dm = K * kU * sa / double(C);
    r.mean.push_back(mean);
    r.rstd.push_back(rstd);
    r.mean_err.push_back(dm);
    for (int64_t j = 0; j < C; ++j) {
      const double n = (xr[j] - mean) * rstd;
      const size_t e = size_t(i * C + j);
      r.y[e] = n * g[size_t(j)] + b[size_t(j)];
      r.err[e] = 2 * (std::fabs(g[size_t(j)]) * ((K + 12) * kU * std::fabs(n) + rstd * dm) +
                      2 * kU * (std::fabs(n * g[size_t(j)]) + std::fabs(b[size_t(j)])));
    }
  }
  return r;
}

struct LnBackwardRef {
  std::vector<double> dx, dx_err, dgamma, dgamma_err, dbeta, dbeta_err;
};

// The analytic backward given the op's inputs (mean and rstd as saved); `old_*` empty: not
// accumulating.
LnBackwardRef ln_backward_ref(const std::vector<double>& dy, const std::vector<double>& x, const std::vector<double>& g,
                              const std::vector<double>& mean, const std::vector<double>& rstd, int64_t rows,
                              int64_t C, const std::vector<double>& old_dx, const std::vector<double>& old_dg,
                              const std::vector<double>& old_db) {
  LnBackwardRef r;
  r.dx.resize(size_t(rows * C));
  r.dx_err.resize(r.dx.size());
  r.dgamma.assign(size_t(C), 0.0);
  r.dbeta.assign(size_t(C), 0.0);
  std::vector<double> mag_g(size_t(C), 0.0), mag_b(size_t(C), 0.0);
  const double K = double((C + 31) / 32 + 7);
  for (int64_t i = 0; i < rows; ++i) {
    std::vector<double> n(static_cast<size_t>(C)), dn(static_cast<size_t>(C));
    double a = 0, b = 0, a1 = 0, a2 = 0;
    for (int64_t j = 0; j < C; ++j) {
      const size_t e = size_t(i * C + j);
      n[size_t(j)] = (x[e] - mean[size_t(i)]) * rstd[size_t(i)];
      dn[size_t(j)] = g[size_t(j)] * dy[e];
      a += dn[size_t(j)], b += dn[size_t(j)] * n[size_t(j)];
      a1 += std::fabs(dn[size_t(j)]), a2 += std::fabs(dn[size_t(j)] * n[size_t(j)]);
      r.dgamma[size_t(j)] += n[size_t(j)] * dy[e];
      r.dbeta[size_t(j)] += dy[e];
      mag_g[size_t(j)] += std::fabs(n[size_t(j)] * dy[e]);
      mag_b[size_t(j)] += std::fabs(dy[e]);
    }
    a /= double(C), b /= double(C), a1 /= double(C), a2 /= double(C);
    for (int64_t j = 0; j < C; ++j) {
      const size_t e = size_t(i * C + j);
      double v = (dn[size_t(j)] - a - n[size_t(j)] * b) * rstd[size_t(i)];
      double err = 2 * (K + 6) * kU * rstd[size_t(i)] *
                   (std::fabs(dn[size_t(j)]) + a1 + std::fabs(n[size_t(j)]) * (a2 + std::fabs(b)));
      if (!old_dx.empty()) {
        err += kU * (std::fabs(old_dx[e]) + std::fabs(v));
        v += old_dx[e];
      }
      r.dx[e] = v;
      r.dx_err[e] = err;
    }
  }
  const double Kr = double((rows + 15) / 16 + 17);
  r.dgamma_err.resize(size_t(C));
  r.dbeta_err.resize(size_t(C));
  for (int64_t j = 0; j < C; ++j) {
    const size_t c = size_t(j);
    r.dgamma_err[c] = (Kr + 4) * kU * mag_g[c];
    r.dbeta_err[c] = Kr * kU * mag_b[c];
    if (!old_dg.empty()) {
      r.dgamma_err[c] += kU * (std::fabs(old_dg[c]) + std::fabs(r.dgamma[c]));
      r.dbeta_err[c] += kU * (std::fabs(old_db[c]) + std::fabs(r.dbeta[c]));
      r.dgamma[c] += old_dg[c];
      r.dbeta[c] += old_db[c];
    }
  }
  return r;
}

// P of one batch of T x T scores (above the diagonal: 0), with the FP32 bound.
void softmax_ref(const std::vector<double>& s, int64_t batch, int64_t T, double scale, std::vector<double>* p,
                 std::vector<double>* err) {
  p->assign(size_t(batch * T * T), 0.0);
  err->assign(p->size(), 0.0);
  for (int64_t row = 0; row < batch * T; ++row) {
    const int64_t n = row % T + 1;
    const double* sr = &s[size_t(row * T)];
    double m = -INFINITY, vmax = 0, sum = 0;
    for (int64_t j = 0; j < n; ++j) m = std::max(m, scale * sr[j]), vmax = std::max(vmax, std::fabs(scale * sr[j]));
    for (int64_t j = 0; j < n; ++j) sum += std::exp(scale * sr[j] - m);
    const double eps_row = (5 + 4 * vmax) * kU, K = double((n + 31) / 32 + 7);
    for (int64_t j = 0; j < n; ++j) {
      const double v = std::exp(scale * sr[j] - m) / sum;
      (*p)[size_t(row * T + j)] = v;
      (*err)[size_t(row * T + j)] = v * (2 * eps_row + (K + 2) * kU);
    }
  }
}

// dS = scale P (dP - sum_k dP_k P_k) for j <= i, 0 above.
void softmax_backward_ref(const std::vector<double>& p, const std::vector<double>& dp, int64_t batch, int64_t T,
                          double scale, std::vector<double>* ds, std::vector<double>* err) {
  ds->assign(size_t(batch * T * T), 0.0);
  err->assign(ds->size(), 0.0);
  for (int64_t row = 0; row < batch * T; ++row) {
    const int64_t n = row % T + 1;
    const size_t o = size_t(row * T);
    double dot = 0, mag = 0;
    for (int64_t j = 0; j < n; ++j) dot += dp[o + size_t(j)] * p[o + size_t(j)], mag += std::fabs(dp[o + size_t(j)] * p[o + size_t(j)]);
    const double dot_err = double((n + 31) / 32 + 7) * kU * mag;
    for (int64_t j = 0; j < n; ++j) {
      const size_t e = o + size_t(j);
      (*ds)[e] = scale * p[e] * (dp[e] - dot);
      (*err)[e] = std::fabs(scale * p[e]) * (dot_err + 4 * kU * (std::fabs(dp[e]) + std::fabs(dot)));
    }
  }
}

double gelu_arg(double x) { return std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x); }
// GPT-2's formula as written: 1 + tanh(u) cancels in double too for x below about -6.
double gelu_literal(double x) { return 0.5 * x * (1.0 + std::tanh(gelu_arg(x))); }
// The same function as x * sigmoid(2u), exact in double for every x: 0.5 (1 + tanh u) = s,
// 0.5 (1 - tanh^2 u) = 2 s (1 - s), with t = exp(-2|u|) giving s and 1 - s without cancellation.
void gelu_parts(double x, double* s, double* oms) {
  const double u = gelu_arg(x), t = std::exp(-2 * std::fabs(u));
  *s = u >= 0 ? 1 / (1 + t) : t / (1 + t);
  *oms = u >= 0 ? t / (1 + t) : 1 / (1 + t);
}
double gelu_ref(double x) {
  double s, oms;
  gelu_parts(x, &s, &oms);
  return x * s;
}
double gelu_grad_ref(double x) {
  double s, oms;
  gelu_parts(x, &s, &oms);
  return s + 2 * x * s * oms * std::sqrt(2.0 / M_PI) * (1.0 + 3 * 0.044715 * x * x);
}
// FP32 bound of tmath::gelu_tanh / gelu_tanh_grad: the argument u carries ~7 roundings, exp(-2|u|)
// turns them into a relative error 14 |u| u; plus the exp's own 2 ulp and the final products.
double gelu_err(double x) {
  return std::fabs(gelu_ref(x)) * kU * (10 + 16 * std::fabs(gelu_arg(x))) + 16 * 0x1p-149 * (1 + std::fabs(x));
}
double gelu_grad_err(double x) {
  double s, oms;
  gelu_parts(x, &s, &oms);
  const double second = std::fabs(2 * x * s * oms * std::sqrt(2.0 / M_PI) * (1.0 + 3 * 0.044715 * x * x));
  return (s + second) * kU * (12 + 32 * std::fabs(gelu_arg(x))) + 16 * 0x1p-149;
}

// ---------------------------------------------------------------- running the ops

struct LnRun {
  Raw y;
  std::vector<float> mean, rstd;
};

LnRun run_ln_forward(cpu::CpuOps& ops, const Raw& x, const Raw& g, const Raw& b, int64_t rows, int64_t C) {
  LnRun r;
  r.y = Raw(x.t, size_t(rows * C) + 1);
  r.y.fill_bits(ops_ref::sentinel_bits(x.t));
  r.mean.assign(size_t(rows) + 1, NAN);
  r.rstd.assign(size_t(rows) + 1, NAN);
  LayerNormArgs a;
  a.rows = rows, a.C = C, a.type = x.t, a.x = x.data(), a.gamma = g.data(), a.beta = b.data(), a.y = r.y.data();
  a.mean = r.mean.data(), a.rstd = r.rstd.data();
  ops.layernorm_forward(a);
  return r;
}

struct LnGrads {
  Raw dx, dgamma, dbeta;
};

LnGrads run_ln_backward(cpu::CpuOps& ops, const Raw& dy, const Raw& x, const Raw& g, const LnRun& fwd,
                        int64_t rows, int64_t C, const Raw* old_dx, const Raw* old_dg, const Raw* old_db) {
  const DType t = x.t;
  LnGrads r;
  r.dx = old_dx ? *old_dx : Raw(t, size_t(rows * C));
  r.dgamma = old_dg ? *old_dg : Raw(t, size_t(C));
  r.dbeta = old_db ? *old_db : Raw(t, size_t(C));
  if (!old_dx) r.dx.fill_bits(ops_ref::sentinel_bits(t));  // written, never read
  if (!old_dg) r.dgamma.fill_bits(ops_ref::sentinel_bits(t)), r.dbeta.fill_bits(ops_ref::sentinel_bits(t));
  LayerNormBackwardArgs a;
  a.rows = rows, a.C = C, a.type = t, a.dy = dy.data(), a.x = x.data(), a.gamma = g.data();
  a.mean = fwd.mean.data(), a.rstd = fwd.rstd.data();
  a.dx = r.dx.data(), a.accumulate_dx = old_dx != nullptr;
  a.dgamma = r.dgamma.data(), a.dbeta = r.dbeta.data(), a.accumulate_dparams = old_dg != nullptr;
  ops.layernorm_backward(a);
  return r;
}

Raw run_softmax(cpu::CpuOps& ops, const Raw& s, DType pt, int64_t batch, int64_t T, float scale) {
  Raw p(pt, size_t(batch * T * T) + 1);
  p.fill_bits(ops_ref::sentinel_bits(pt));
  ops.causal_softmax_forward(CausalSoftmaxArgs{batch, T, scale, s.data(), s.t, p.data(), pt});
  return p;
}

Raw run_softmax_backward(cpu::CpuOps& ops, const Raw& p, const Raw& dp, DType dst, int64_t batch, int64_t T,
                         float scale) {
  Raw ds(dst, size_t(batch * T * T) + 1);
  ds.fill_bits(ops_ref::sentinel_bits(dst));
  ops.causal_softmax_backward(CausalSoftmaxBackwardArgs{batch, T, scale, p.data(), p.t, dp.data(), dp.t, ds.data(), dst});
  return ds;
}

// Tokens: a frequent token at about half the positions, the rest uniform over the vocabulary.
std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed, int32_t frequent) {
  Rng rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& v : t) v = rng.uniform() < 0.5 ? frequent : int32_t(rng.below(uint64_t(vocab)));
  return t;
}

}  // namespace

// ---------------------------------------------------------------- the scalar functions

TEST_CASE("tops: exp_f32 within 2 ulp of exp, gradual underflow, overflow and NaN", "[tops]") {
  double worst_ulp = 0, worst_sub = 0;
  Rng rng(1);
  size_t n = 0;
  auto check = [&](float x) {
    const float got = tmath::exp_f32(x);
    const double ref = std::exp(double(x));
    ++n;
    if (ref >= 0x1p-126 && ref <= double(std::numeric_limits<float>::max())) {
      const double ulp = std::ldexp(1.0, std::ilogb(ref) - 23);
      worst_ulp = std::max(worst_ulp, std::fabs(double(got) - ref) / ulp);
    } else if (ref < 0x1p-126) {
      worst_sub = std::max(worst_sub, std::fabs(double(got) - ref) / 0x1p-149);
    }
  };
  for (int i = 0; i < 400000; ++i) check(float(rng.uniform(-104.0, 88.72)));
  for (int i = 0; i < 100000; ++i) check(float(rng.uniform(-1.0, 1.0)));
  for (float x = -1e-6f; x < 1e-6f; x += 1.37e-9f) check(x);
  INFO(n << " arguments: worst " << worst_ulp << " ulp (normal results), " << worst_sub
         << " x 2^-149 (subnormal results)");
  CHECK(worst_ulp <= 2.0);
  CHECK(worst_sub <= 1.0);
  CHECK(tmath::exp_f32(0.0f) == 1.0f);
  CHECK(tmath::exp_f32(-0.0f) == 1.0f);
  CHECK(tmath::exp_f32(89.0f) == INFINITY);
  CHECK(tmath::exp_f32(INFINITY) == INFINITY);
  CHECK(tmath::exp_f32(-INFINITY) == 0.0f);
  CHECK(tmath::exp_f32(-104.5f) == 0.0f);
  CHECK(std::isnan(tmath::exp_f32(NAN)));
  CHECK(tmath::exp_f32(88.7f) < INFINITY);
  CHECK(tmath::exp_f32(-100.0f) > 0.0f);  // subnormal, not flushed
}

TEST_CASE("tops: every kernel set's exp of non-positive arguments gives exp_f32's bits", "[tops]") {
  // The exp inside the GELU, softmax and attention kernels: every 97th pattern with the sign bit set
  // (-0 down to -inf, then the negative NaNs), every pattern from -86 to -104.5 (subnormal and zero
  // results, the far end of the 2^k scaling) and from -0 down 2^20 patterns (tiny arguments), +0
  // and positive NaNs.
  std::vector<uint32_t> bits;
  for (uint64_t u = 0x80000000u; u <= 0xffffffffu; u += 97) bits.push_back(uint32_t(u));
  for (uint32_t u = f32_bits(-86.0f); u <= f32_bits(-104.5f); ++u) bits.push_back(u);
  for (uint32_t u = 0x80000000u; u < 0x80100000u; ++u) bits.push_back(u);
  for (uint32_t u : {0x00000000u, 0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0xff800000u}) bits.push_back(u);
  std::string ran;
  for (const auto& k : cpu::available_row_kernels()) ran += std::string(ran.empty() ? "" : ", ") + k.isa;
  WARN("exp kernels checked against exp_f32 on " << bits.size() << " arguments: " << ran
                                                 << " (active: " << cpu::active_row_kernels().isa << ")");
  const auto& ks = cpu::available_row_kernels();
  const size_t chunk = size_t(1) << 20;
  std::vector<float> x(chunk), want(chunk), y(chunk);
  std::vector<size_t> wrong(ks.size(), 0);
  std::vector<std::string> first(ks.size());
  for (size_t c0 = 0; c0 < bits.size(); c0 += chunk) {
    const size_t n = std::min(chunk, bits.size() - c0);
    std::memcpy(x.data(), bits.data() + c0, n * 4);
    for (size_t i = 0; i < n; ++i) want[i] = tmath::exp_f32(x[i]);
    for (size_t s = 0; s < ks.size(); ++s) {
      ks[s].exp_nonpositive(x.data(), y.data(), int64_t(n));
      for (size_t i = 0; i < n; ++i) {
        if (f32_bits(want[i]) == f32_bits(y[i])) continue;
        if (wrong[s]++ > 0) continue;
        std::ostringstream o;
        o << "x " << std::hexfloat << x[i] << ": " << y[i] << " vs " << want[i];
        first[s] = o.str();
      }
    }
  }
  for (size_t s = 0; s < ks.size(); ++s) {
    INFO(ks[s].isa << ": " << first[s]);
    CHECK(wrong[s] == 0);
  }
  // In place, on a length with a partial last vector.
  std::vector<float> v = {-0.5f, -1.0f, -2.0f, -3.0f, -80.0f, -90.0f, -100.0f, -0.0f, 0.0f, -1e-20f, -7.0f,
                          -9.0f, -11.0f, -13.0f, -15.0f, -17.0f, -19.0f, -21.0f, -23.0f};
  for (const auto& k : cpu::available_row_kernels()) {
    std::vector<float> w = v;
    k.exp_nonpositive(w.data(), w.data(), int64_t(w.size()));
    for (size_t i = 0; i < v.size(); ++i) CHECK(f32_bits(w[i]) == f32_bits(tmath::exp_f32(v[i])));
  }
}

TEST_CASE("tops: the analytic double backward formulas match central finite differences", "[tops]") {
  const double h = 1e-6;
  SECTION("layer norm: dx, dgamma, dbeta") {
    const int64_t rows = 3, C = 7;
    const auto x = to_double(random_raw(DType::F32, size_t(rows * C), 11, 2.0, 1.5));
    const auto g = to_double(random_raw(DType::F32, size_t(C), 12));
    const auto b = to_double(random_raw(DType::F32, size_t(C), 13));
    const auto dy = to_double(random_raw(DType::F32, size_t(rows * C), 14));
    const double eps = 1e-5;
    auto loss = [&](const std::vector<double>& xx, const std::vector<double>& gg, const std::vector<double>& bb) {
      const auto r = ln_forward_ref(xx, gg, bb, rows, C, eps);
      double l = 0;
      for (size_t i = 0; i < dy.size(); ++i) l += dy[i] * r.y[i];
      return l;
    };
    const auto fwd = ln_forward_ref(x, g, b, rows, C, eps);
    const auto an = ln_backward_ref(dy, x, g, fwd.mean, fwd.rstd, rows, C, {}, {}, {});
    for (size_t i = 0; i < x.size(); ++i) {
      std::vector<double> xv = x;
      xv[i] = x[i] + h;
      const double lp = loss(xv, g, b);
      xv[i] = x[i] - h;
      const double lm = loss(xv, g, b);
      const double num = (lp - lm) / (2 * h);
      INFO("dx[" << i << "] analytic " << an.dx[i] << " finite differences " << num);
      REQUIRE(std::fabs(num - an.dx[i]) <= 1e-6 * (1 + std::fabs(an.dx[i])));
    }
    for (size_t j = 0; j < size_t(C); ++j) {
      std::vector<double> gv = g, bv = b;
      gv[j] = g[j] + h;
      double lp = loss(x, gv, b);
      gv[j] = g[j] - h;
      double lm = loss(x, gv, b);
      INFO("dgamma[" << j << "] analytic " << an.dgamma[j]);
      REQUIRE(std::fabs((lp - lm) / (2 * h) - an.dgamma[j]) <= 1e-6 * (1 + std::fabs(an.dgamma[j])));
      bv[j] = b[j] + h;
      lp = loss(x, g, bv);
      bv[j] = b[j] - h;
      lm = loss(x, g, bv);
      INFO("dbeta[" << j << "] analytic " << an.dbeta[j]);
      REQUIRE(std::fabs((lp - lm) / (2 * h) - an.dbeta[j]) <= 1e-6 * (1 + std::fabs(an.dbeta[j])));
    }
  }
  SECTION("causal softmax: dS, zero above the diagonal") {
    const int64_t batch = 2, T = 5;
    const double scale = 0.7;
    const auto s = to_double(random_raw(DType::F32, size_t(batch * T * T), 21, 2.0));
    const auto dp = to_double(random_raw(DType::F32, size_t(batch * T * T), 22));
    auto loss = [&](const std::vector<double>& ss) {
      std::vector<double> p, e;
      softmax_ref(ss, batch, T, scale, &p, &e);
      double l = 0;
      for (size_t i = 0; i < p.size(); ++i) l += dp[i] * p[i];
      return l;
    };
    std::vector<double> p, e, ds, de;
    softmax_ref(s, batch, T, scale, &p, &e);
    softmax_backward_ref(p, dp, batch, T, scale, &ds, &de);
    for (size_t i = 0; i < s.size(); ++i) {
      std::vector<double> sv = s;
      sv[i] = s[i] + h;
      const double lp = loss(sv);
      sv[i] = s[i] - h;
      const double lm = loss(sv);
      const double num = (lp - lm) / (2 * h);
      INFO("dS[" << i << "] analytic " << ds[i] << " finite differences " << num);
      REQUIRE(std::fabs(num - ds[i]) <= 1e-7 * (1 + std::fabs(ds[i])));
      if (int64_t(i % size_t(T)) > int64_t(i / size_t(T)) % T) REQUIRE(num == 0.0);  // j > i: P ignores S
    }
  }
  SECTION("GELU (tanh): gelu', and the sigmoid form equals GPT-2's tanh formula") {
    for (double x = -6; x <= 6; x += 0.01) {
      INFO("x " << x << " sigmoid form " << gelu_ref(x) << " tanh formula " << gelu_literal(x));
      REQUIRE(std::fabs(gelu_ref(x) - gelu_literal(x)) <= 1e-14 * std::max(1.0, std::fabs(x)));
    }
    Rng rng(31);
    for (int k = 0; k < 2000; ++k) {
      const double x = 6 * rng.uniform() - 3 + (k % 7 == 0 ? 5 * rng.normal() : 0.0);
      const double hx = 1e-5 * std::max(1.0, std::fabs(x));
      const double num = (gelu_ref(x + hx) - gelu_ref(x - hx)) / (2 * hx);
      INFO("x " << x << " analytic " << gelu_grad_ref(x) << " finite differences " << num);
      REQUIRE(std::fabs(num - gelu_grad_ref(x)) <= 1e-8 * (1 + std::fabs(num)));
    }
  }
  SECTION("embedding: dwte and dwpe of a linear map") {
    const int64_t B = 2, T = 3, C = 2, V = 4;
    const std::vector<int32_t> tok = {1, 3, 1, 1, 0, 3};
    const auto wte = to_double(random_raw(DType::F32, size_t(V * C), 41));
    const auto wpe = to_double(random_raw(DType::F32, size_t(T * C), 42));
    const auto dx = to_double(random_raw(DType::F32, size_t(B * T * C), 43));
    auto loss = [&](const std::vector<double>& te, const std::vector<double>& pe) {
      double l = 0;
      for (int64_t i = 0; i < B * T; ++i)
        for (int64_t c = 0; c < C; ++c)
          l += dx[size_t(i * C + c)] * (te[size_t(tok[size_t(i)] * C + c)] + pe[size_t((i % T) * C + c)]);
      return l;
    };
    for (int64_t v = 0; v < V; ++v)
      for (int64_t c = 0; c < C; ++c) {
        double an = 0;
        for (int64_t i = 0; i < B * T; ++i)
          if (tok[size_t(i)] == v) an += dx[size_t(i * C + c)];
        std::vector<double> te = wte;
        te[size_t(v * C + c)] += h;
        const double lp = loss(te, wpe);
        te[size_t(v * C + c)] -= 2 * h;
        const double lm = loss(te, wpe);
        REQUIRE(std::fabs((lp - lm) / (2 * h) - an) <= 1e-8);
      }
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        double an = 0;
        for (int64_t b = 0; b < B; ++b) an += dx[size_t((b * T + t) * C + c)];
        std::vector<double> pe = wpe;
        pe[size_t(t * C + c)] += h;
        const double lp = loss(wte, pe);
        pe[size_t(t * C + c)] -= 2 * h;
        const double lm = loss(wte, pe);
        REQUIRE(std::fabs((lp - lm) / (2 * h) - an) <= 1e-8);
      }
  }
}

// ---------------------------------------------------------------- layer norm

TEST_CASE("tops layernorm_forward: every dtype against the double reference, saved statistics, in place", "[tops]") {
  cpu::CpuOps ops;
  struct Shape {
    int64_t rows, C;
  };
  const Shape shapes[] = {{1, 1}, {3, 7}, {67, 768}, {5, 1000}, {130, 33}, {20, 1600}};
  uint64_t seed = 100;
  for (const Shape& sh : shapes)
    for (DType t : kTypes) {
      INFO("rows " << sh.rows << " C " << sh.C << " " << dtype_name(t));
      const Raw x = random_raw(t, size_t(sh.rows * sh.C), ++seed, 2.0, 1.5);
      const Raw g = random_raw(t, size_t(sh.C), ++seed, 0.5, 1.0);
      const Raw b = random_raw(t, size_t(sh.C), ++seed, 0.5);
      const LnRun run = run_ln_forward(ops, x, g, b, sh.rows, sh.C);
      const auto ref = ln_forward_ref(to_double(x), to_double(g), to_double(b), sh.rows, sh.C, double(kLayerNormEps));
      Close cy(t), cs(DType::F32);
      for (int64_t i = 0; i < sh.rows; ++i) {
        for (int64_t j = 0; j < sh.C; ++j) {
          const size_t e = size_t(i * sh.C + j);
          cy(run.y.get(e), ref.y[e], ref.err[e], at_index("y", i, j));
        }
        cs(run.mean[size_t(i)], ref.mean[size_t(i)], 2 * ref.mean_err[size_t(i)], at_index("mean", i));
        cs(run.rstd[size_t(i)], ref.rstd[size_t(i)], 2 * double((sh.C + 31) / 32 + 8) * kU * ref.rstd[size_t(i)],
           at_index("rstd", i));
      }
      TOPS_REQUIRE_CLOSE(cy);
      TOPS_REQUIRE_CLOSE(cs);
      REQUIRE(run.y.bits(size_t(sh.rows * sh.C)) == ops_ref::sentinel_bits(t));  // nothing past the end
      REQUIRE(std::isnan(run.mean[size_t(sh.rows)]));
      // In place (y = x) gives the same bits; without statistics too.
      Raw xin = x;
      LayerNormArgs a;
      a.rows = sh.rows, a.C = sh.C, a.type = t, a.x = xin.data(), a.gamma = g.data(), a.beta = b.data();
      a.y = xin.data();
      ops.layernorm_forward(a);
      for (size_t e = 0; e < xin.size(); ++e) REQUIRE(xin.bits(e) == run.y.bits(e));
    }
}

TEST_CASE("tops layernorm_backward: dx, dgamma, dbeta against the analytic backward, accumulate flags", "[tops]") {
  cpu::CpuOps ops;
  cpu::CpuOps general;
  struct Shape {
    int64_t rows, C;
  };
  const Shape shapes[] = {{1, 1}, {3, 7}, {67, 768}, {40, 1000}, {300, 33}};
  uint64_t seed = 200;
  for (const Shape& sh : shapes)
    for (DType t : kTypes)
      for (int acc = 0; acc < 4; ++acc) {
        const bool acc_dx = acc & 1, acc_dp = acc & 2;
        INFO("rows " << sh.rows << " C " << sh.C << " " << dtype_name(t) << " accumulate dx " << acc_dx
                     << " dparams " << acc_dp);
        const int64_t rows = sh.rows, C = sh.C;
        const Raw x = random_raw(t, size_t(rows * C), ++seed, 2.0, 1.5);
        const Raw g = random_raw(t, size_t(C), ++seed, 0.5, 1.0);
        const Raw b = random_raw(t, size_t(C), ++seed, 0.5);
        const Raw dy = random_raw(t, size_t(rows * C), ++seed);
        const Raw old_dx = random_raw(t, size_t(rows * C), ++seed);
        const Raw old_dg = random_raw(t, size_t(C), ++seed), old_db = random_raw(t, size_t(C), ++seed);
        const LnRun fwd = run_ln_forward(ops, x, g, b, rows, C);
        const LnGrads got = run_ln_backward(ops, dy, x, g, fwd, rows, C, acc_dx ? &old_dx : nullptr,
                                            acc_dp ? &old_dg : nullptr, acc_dp ? &old_db : nullptr);
        std::vector<double> mean(fwd.mean.begin(), fwd.mean.end() - 1), rstd(fwd.rstd.begin(), fwd.rstd.end() - 1);
        const auto ref = ln_backward_ref(to_double(dy), to_double(x), to_double(g), mean, rstd, rows, C,
                                         acc_dx ? to_double(old_dx) : std::vector<double>{},
                                         acc_dp ? to_double(old_dg) : std::vector<double>{},
                                         acc_dp ? to_double(old_db) : std::vector<double>{});
        Close cdx(t), cdg(t), cdb(t);
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < C; ++j) {
            const size_t e = size_t(i * C + j);
            cdx(got.dx.get(e), ref.dx[e], ref.dx_err[e], at_index("dx", i, j));
          }
        for (int64_t j = 0; j < C; ++j) {
          cdg(got.dgamma.get(size_t(j)), ref.dgamma[size_t(j)], ref.dgamma_err[size_t(j)], at_index("dgamma", j));
          cdb(got.dbeta.get(size_t(j)), ref.dbeta[size_t(j)], ref.dbeta_err[size_t(j)], at_index("dbeta", j));
        }
        TOPS_REQUIRE_CLOSE(cdx);
        TOPS_REQUIRE_CLOSE(cdg);
        TOPS_REQUIRE_CLOSE(cdb);
        if (!acc_dp) {  // dbeta is row_sum(dy), bit for bit
          Raw rs(t, size_t(C));
          general.row_sum(RowSumArgs{dy.data(), t, rows, C, C, rs.data(), t});
          REQUIRE(rs.bytes == got.dbeta.bytes);
        }
      }
}

TEST_CASE("tops layernorm_backward: no rows gives empty sums, invalid arguments are refused", "[tops]") {
  cpu::CpuOps ops;
  Raw dg = random_raw(DType::BF16, 5, 1), db = random_raw(DType::BF16, 5, 2);
  const Raw old_dg = dg;
  LayerNormBackwardArgs a;
  a.rows = 0, a.C = 5, a.type = DType::BF16, a.dgamma = dg.data(), a.dbeta = db.data();
  ops.layernorm_backward(a);
  for (size_t j = 0; j < 5; ++j) REQUIRE((dg.get(j) == 0.0f && db.get(j) == 0.0f));
  a.accumulate_dparams = true;
  dg = old_dg;
  ops.layernorm_backward(a);
  REQUIRE(dg.bytes == old_dg.bytes);
  a.dbeta = a.dgamma;
  REQUIRE_THROWS_AS(ops.layernorm_backward(a), Error);
  LayerNormArgs f;
  f.rows = 2, f.C = 0;
  REQUIRE_THROWS_AS(ops.layernorm_forward(f), Error);
  f.C = 3, f.type = DType::I32;
  REQUIRE_THROWS_AS(ops.layernorm_forward(f), Error);
  Raw x(DType::F32, 6), y(DType::F32, 6), g(DType::F32, 3);
  float mean[2];
  f.type = DType::F32, f.x = x.data(), f.gamma = g.data(), f.beta = g.data(), f.y = y.data(), f.mean = mean;
  REQUIRE_THROWS_AS(ops.layernorm_forward(f), Error);  // mean without rstd
}

// ---------------------------------------------------------------- causal softmax

TEST_CASE("tops causal_softmax_forward: every dtype pair, exact zeros above the diagonal, never-read upper scores",
          "[tops]") {
  cpu::CpuOps ops;
  uint64_t seed = 300;
  for (int64_t T : {1, 5, 33, 100})
    for (DType st : kTypes)
      for (DType pt : kTypes) {
        const int64_t batch = 3;
        const float scale = T == 33 ? 1.0f : 0.125f;
        INFO("T " << T << " " << dtype_name(st) << " -> " << dtype_name(pt) << " scale " << scale);
        Raw s = random_raw(st, size_t(batch * T * T), ++seed, 8.0);
        for (int64_t row = 0; row < batch * T; ++row)
          for (int64_t j = row % T + 1; j < T; ++j) s.set_bits(size_t(row * T + j), ops_ref::sentinel_bits(st));
        const Raw p = run_softmax(ops, s, pt, batch, T, scale);
        std::vector<double> sd = to_double(s), ref, err;
        for (double& v : sd)
          if (std::isnan(v)) v = 0;  // the reference ignores j > i as well
        softmax_ref(sd, batch, T, scale, &ref, &err);
        Close c(pt);
        for (int64_t row = 0; row < batch * T; ++row) {
          double sum = 0;
          for (int64_t j = 0; j < T; ++j) {
            const size_t e = size_t(row * T + j);
            if (j > row % T) {
              INFO("P" << at_index("", row / T, row % T, j) << " above the diagonal");
              REQUIRE(p.bits(e) == 0u);  // exactly +0
            } else {
              c(p.get(e), ref[e], err[e], at_index("P", row / T, row % T, j));
              sum += p.get(e);
            }
          }
          REQUIRE(std::fabs(sum - 1.0) <= 4 * double(T) * ops_ref::unit_roundoff(pt) + 1e-6);
        }
        TOPS_REQUIRE_CLOSE(c);
        REQUIRE(p.bits(size_t(batch * T * T)) == ops_ref::sentinel_bits(pt));
        if (st == pt) {  // in place
          Raw sp = s;
          ops.causal_softmax_forward(CausalSoftmaxArgs{batch, T, scale, sp.data(), st, sp.data(), pt});
          for (size_t e = 0; e < sp.size(); ++e) REQUIRE(sp.bits(e) == p.bits(e));
        }
      }
}

TEST_CASE("tops causal_softmax_forward: q_rows, the last rows of each matrix alone, give the full matrices' bits",
          "[tops]") {
  // Sampling's new tokens against every cached key: a [q_rows, T] matrix holds positions
  // T - q_rows .. T - 1 of the causal T x T one, and each row is the full matrix's row, bit for bit.
  cpu::CpuOps ops;
  uint64_t seed = 900;
  for (int64_t T : {1, 7, 64, 130})
    for (int64_t Tq : {int64_t(1), int64_t(3), T})
      for (DType st : kTypes)
        for (DType pt : kTypes) {
          if (Tq > T) continue;
          const int64_t batch = 3;
          const float scale = 0.125f;
          INFO("T " << T << " q_rows " << Tq << " " << dtype_name(st) << " -> " << dtype_name(pt));
          const Raw s = random_raw(st, size_t(batch * T * T), ++seed, 8.0);
          const Raw full = run_softmax(ops, s, pt, batch, T, scale);
          Raw sq(st, size_t(batch * Tq * T));
          for (int64_t b = 0; b < batch; ++b)
            for (int64_t r = 0; r < Tq; ++r)
              for (int64_t j = 0; j < T; ++j) {
                const int64_t i = T - Tq + r;  // the query's position
                sq.set_bits(size_t((b * Tq + r) * T + j),
                            j > i ? ops_ref::sentinel_bits(st) : s.bits(size_t((b * T + i) * T + j)));  // never read
              }
          Raw p(pt, size_t(batch * Tq * T) + 1);
          p.fill_bits(ops_ref::sentinel_bits(pt));
          CausalSoftmaxArgs a{batch, T, scale, sq.data(), st, p.data(), pt};
          a.q_rows = Tq;
          ops.causal_softmax_forward(a);
          for (int64_t b = 0; b < batch; ++b)
            for (int64_t r = 0; r < Tq; ++r)
              for (int64_t j = 0; j < T; ++j) {
                INFO("P" << at_index("", b, r, j));
                REQUIRE(p.bits(size_t((b * Tq + r) * T + j)) == full.bits(size_t((b * T + T - Tq + r) * T + j)));
              }
          REQUIRE(p.bits(size_t(batch * Tq * T)) == ops_ref::sentinel_bits(pt));
        }
  CausalSoftmaxArgs bad{1, 4, 1.0f, nullptr, DType::F32, nullptr, DType::F32};
  bad.q_rows = 5;
  REQUIRE_THROWS_WITH(ops.causal_softmax_forward(bad), Catch::Contains("q_rows=5 outside [0, T=4]"));
}

TEST_CASE("tops causal_softmax: a NaN row stays NaN, other rows and -inf scores are unaffected", "[tops]") {
  cpu::CpuOps ops;
  const int64_t T = 6;
  Raw s = random_raw(DType::F32, size_t(T * T), 5);
  s.set(size_t(3 * T + 1), NAN);       // row 3
  s.set(size_t(4 * T + 2), -INFINITY);  // row 4: that entry's probability is 0
  const Raw p = run_softmax(ops, s, DType::F32, 1, T, 1.0f);
  for (int64_t j = 0; j <= 3; ++j) REQUIRE(std::isnan(p.get(size_t(3 * T + j))));
  REQUIRE(p.get(size_t(4 * T + 2)) == 0.0f);
  for (int64_t i : {0, 1, 2, 4, 5}) {
    double sum = 0;
    for (int64_t j = 0; j <= i; ++j) sum += p.get(size_t(i * T + j));
    REQUIRE(std::fabs(sum - 1.0) < 1e-6);
  }
}

TEST_CASE("tops causal_softmax_backward: every dtype triple against the analytic backward, zeros above", "[tops]") {
  cpu::CpuOps ops;
  uint64_t seed = 400;
  for (int64_t T : {1, 7, 64, 90})
    for (DType pt : kTypes)
      for (DType dpt : kTypes)
        for (DType dst : kTypes) {
          const int64_t batch = 2;
          const float scale = 0.125f;
          INFO("T " << T << " p " << dtype_name(pt) << " dp " << dtype_name(dpt) << " ds " << dtype_name(dst));
          const Raw s = random_raw(DType::F32, size_t(batch * T * T), ++seed, 8.0);
          Raw p = run_softmax(ops, s, pt, batch, T, scale);
          Raw dp = random_raw(dpt, size_t(batch * T * T), ++seed);
          // Above the diagonal P and dP are never read.
          for (int64_t row = 0; row < batch * T; ++row)
            for (int64_t j = row % T + 1; j < T; ++j) {
              p.set_bits(size_t(row * T + j), ops_ref::sentinel_bits(pt));
              dp.set_bits(size_t(row * T + j), ops_ref::sentinel_bits(dpt));
            }
          const Raw ds = run_softmax_backward(ops, p, dp, dst, batch, T, scale);
          std::vector<double> pd = to_double(p), dpd = to_double(dp), ref, err;
          pd.resize(size_t(batch * T * T));
          for (size_t e = 0; e < pd.size(); ++e)
            if (std::isnan(pd[e])) pd[e] = 0, dpd[e] = 0;
          softmax_backward_ref(pd, dpd, batch, T, scale, &ref, &err);
          Close c(dst);
          for (int64_t row = 0; row < batch * T; ++row)
            for (int64_t j = 0; j < T; ++j) {
              const size_t e = size_t(row * T + j);
              if (j > row % T) {
                REQUIRE(ds.bits(e) == 0u);
              } else {
                c(ds.get(e), ref[e], err[e], at_index("dS", row / T, row % T, j));
              }
            }
          TOPS_REQUIRE_CLOSE(c);
          REQUIRE(ds.bits(size_t(batch * T * T)) == ops_ref::sentinel_bits(dst));
          if (dpt == dst) {  // in place: dS over dP
            Raw dd = dp;
            ops.causal_softmax_backward(CausalSoftmaxBackwardArgs{batch, T, scale, p.data(), pt, dd.data(), dpt,
                                                                  dd.data(), dst});
            for (size_t e = 0; e + 1 < ds.size(); ++e) REQUIRE(dd.bits(e) == ds.bits(e));
          }
        }
}

// ---------------------------------------------------------------- GELU

TEST_CASE("tops gelu_tanh forward and backward: every dtype against the double reference, in place", "[tops]") {
  cpu::CpuOps ops;
  uint64_t seed = 500;
  for (int64_t n : {1, 7, 2049, 30000})
    for (DType t : kTypes) {
      INFO("n " << n << " " << dtype_name(t));
      const Raw x = random_raw(t, size_t(n), ++seed, 2.5);
      const Raw dy = random_raw(t, size_t(n), ++seed);
      Raw y(t, size_t(n) + 1), dx(t, size_t(n) + 1);
      y.fill_bits(ops_ref::sentinel_bits(t));
      dx.fill_bits(ops_ref::sentinel_bits(t));
      ops.gelu_tanh_forward(GeluArgs{x.data(), y.data(), t, n});
      ops.gelu_tanh_backward(GeluBackwardArgs{x.data(), dy.data(), dx.data(), t, n});
      Close cf(t), cb(t);
      for (size_t i = 0; i < size_t(n); ++i) {
        const double xv = x.get(i), g = dy.get(i);
        cf(y.get(i), gelu_ref(xv), gelu_err(xv), at_index("y", int64_t(i)));
        cb(dx.get(i), g * gelu_grad_ref(xv), std::fabs(g) * gelu_grad_err(xv) + kU * std::fabs(g * gelu_grad_ref(xv)),
           at_index("dx", int64_t(i)));
      }
      TOPS_REQUIRE_CLOSE(cf);
      TOPS_REQUIRE_CLOSE(cb);
      REQUIRE(y.bits(size_t(n)) == ops_ref::sentinel_bits(t));
      REQUIRE(dx.bits(size_t(n)) == ops_ref::sentinel_bits(t));
      Raw xi = x, gi = dy;  // in place: y over x, dx over dy
      ops.gelu_tanh_forward(GeluArgs{xi.data(), xi.data(), t, n});
      ops.gelu_tanh_backward(GeluBackwardArgs{x.data(), gi.data(), gi.data(), t, n});
      for (size_t i = 0; i < size_t(n); ++i) REQUIRE((xi.bits(i) == y.bits(i) && gi.bits(i) == dx.bits(i)));
    }
}

TEST_CASE("tops gelu_tanh: large, tiny and special arguments", "[tops]") {
  const float xs[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 3.0f, -3.0f, 10.0f, -10.0f, -12.0f, 30.0f, -30.0f, 1e4f, -1e4f,
                      3e38f, -3e38f, INFINITY, -INFINITY, NAN};
  for (float x : xs) {
    INFO("x " << x << ": gelu " << tmath::gelu_tanh(x) << ", gelu' " << tmath::gelu_tanh_grad(x));
    const float y = tmath::gelu_tanh(x), g = tmath::gelu_tanh_grad(x);
    if (std::isnan(x)) {
      REQUIRE((std::isnan(y) && std::isnan(g)));
    } else if (x == -INFINITY) {
      REQUIRE(std::isnan(y));  // -inf * 0, as PyTorch's formula
      REQUIRE(g == 0.0f);
    } else if (x == INFINITY) {
      REQUIRE((y == INFINITY && g == 1.0f));
    } else {
      const double ref = gelu_ref(x), gref = gelu_grad_ref(x);
      REQUIRE(std::fabs(y - ref) <= gelu_err(x) + kU * std::fabs(ref));
      REQUIRE(std::fabs(g - gref) <= gelu_grad_err(x) + kU * std::fabs(gref));
      REQUIRE(std::isfinite(g));
    }
  }
}

TEST_CASE("tops gelu_tanh: every kernel of this CPU gives the scalar functions' bits (the CUDA twin's)", "[tops]") {
  const auto& ks = cpu::available_row_kernels();
  REQUIRE(std::string(ks.front().isa) == "scalar");
  std::string ran;
  for (const auto& k : ks) ran += std::string(ran.empty() ? "" : ", ") + k.isa;
  WARN("GELU kernels checked against the scalar functions: " << ran << " (active: " << cpu::active_row_kernels().isa
                                                            << ")");
#if defined(__x86_64__)
  __builtin_cpu_init();
  CHECK((ks.size() >= 2) == bool(__builtin_cpu_supports("avx2")));
  CHECK((ks.size() == 3) == (ks.size() >= 2 && __builtin_cpu_supports("avx512f")));
#endif
  std::vector<float> x;
  const float specials[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-41f, 3.0f, -3.0f, 10.0f, -10.0f, -12.0f, 30.0f, -30.0f,
                            1e4f, -1e4f, 3e38f, -3e38f, INFINITY, -INFINITY, NAN, 4.6f, -4.6f, 88.0f, -52.0f};
  x.assign(std::begin(specials), std::end(specials));
  Rng rng(77);
  for (int i = 0; i < 200000; ++i) {
    const double mag = std::ldexp(1.0, int(rng.below(40)) - 30);  // 2^-30 .. 2^9
    x.push_back(float(rng.normal() * mag));
  }
  Rng rdy(78);
  std::vector<float> dy(x.size());
  for (float& v : dy) v = float(rdy.normal());
  // Every kernel on the whole array and on short lengths (the vector kernels' partial last vector).
  for (const cpu::RowKernels& k : ks)
    for (const int64_t n : {int64_t(x.size()), int64_t(1), int64_t(7), int64_t(15), int64_t(17), int64_t(31)}) {
      std::vector<float> y(size_t(n), -7.0f), dx(size_t(n), -7.0f), in_place(x.begin(), x.begin() + n);
      std::vector<float> dx_is_dy(dy.begin(), dy.begin() + n), dx_is_x(x.begin(), x.begin() + n);
      k.gelu_forward(x.data(), y.data(), n);
      k.gelu_backward(x.data(), dy.data(), dx.data(), n);
      k.gelu_forward(in_place.data(), in_place.data(), n);        // y may be x
      k.gelu_backward(x.data(), dx_is_dy.data(), dx_is_dy.data(), n);  // dx may be dy
      k.gelu_backward(dx_is_x.data(), dy.data(), dx_is_x.data(), n);   // or x
      size_t wrong_y = 0, wrong_dx = 0, wrong_in_place = 0;
      std::ostringstream first;
      for (size_t i = 0; i < size_t(n); ++i) {
        const float ry = tmath::gelu_tanh(x[i]), rdx = dy[i] * tmath::gelu_tanh_grad(x[i]);
        const bool bad_y = !same(ry, y[i]), bad_dx = !same(rdx, dx[i]);
        if ((bad_y || bad_dx) && wrong_y + wrong_dx == 0)
          first << "x " << x[i] << " gelu " << y[i] << " vs " << ry << ", dy * gelu' " << dx[i] << " vs " << rdx;
        wrong_y += bad_y;
        wrong_dx += bad_dx;
        wrong_in_place += !same(ry, in_place[i]) + !same(rdx, dx_is_dy[i]) + !same(rdx, dx_is_x[i]);
      }
      INFO(k.isa << ", " << n << " elements: " << first.str());
      CHECK(wrong_y == 0);
      CHECK(wrong_dx == 0);
      CHECK(wrong_in_place == 0);
    }
}

TEST_CASE("tops gelu_tanh BF16 and FP16: the op gives the specification's bits for every pattern, widened and rounded",
          "[tops]") {
  // Every 16-bit pattern as x (signalling and quiet NaNs with payloads, subnormals, infinities,
  // both zeros), random dy with specials; the op (which looks 16-bit results up in tables) against
  // the scalar specification: widen, the FP32 function, round once. Whole (blocks in parallel),
  // at short lengths and at a block's edge, from an odd offset, in place.
  for (const DType t : {DType::BF16, DType::F16}) {
    const auto widen = [t](uint16_t b) {
      float f;
      convert(&b, t, &f, DType::F32, 1);
      return f;
    };
    const auto round = [t](float f) {
      uint16_t b;
      convert(&f, DType::F32, &b, t, 1);
      return b;
    };
    const uint16_t exp_mask = t == DType::BF16 ? 0x7f80u : 0x7c00u;
    const auto is_nan = [exp_mask](uint16_t b) { return (b & 0x7fffu) > exp_mask; };
    const auto same16 = [&](uint16_t a, uint16_t b) { return a == b || (is_nan(a) && is_nan(b)); };
    // 3 x 65536 elements: every pattern three times over, so that the op runs more than one block
    // on every thread it forks.
    std::vector<uint16_t> x;
    for (int rep = 0; rep < 3; ++rep)
      for (uint32_t b = 0; b < 65536; ++b) x.push_back(uint16_t(b));
    Rng rng(79);
    std::vector<uint16_t> dy(x.size());
    for (uint16_t& v : dy) v = round(float(rng.normal()) * 4.0f);
    const float dy_specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-7f, -3e-8f, 6e4f, 1e30f};
    for (size_t i = 0; i < std::size(dy_specials); ++i) dy[i * 7919 % dy.size()] = round(dy_specials[i]);
    cpu::CpuOps ops;
    for (const int64_t off : {int64_t(0), int64_t(1)})
      for (const int64_t n : {int64_t(x.size()) - off, int64_t(1), int64_t(7), int64_t(15), int64_t(2047),
                              int64_t(2049), int64_t(4099)}) {
        const uint16_t* xs = x.data() + off;
        const uint16_t* dys = dy.data() + off;
        std::vector<uint16_t> y(size_t(n), 0x1234), dx(size_t(n), 0x1234), in_place(xs, xs + n), dx_is_dy(dys, dys + n),
            dx_is_x(xs, xs + n);
        ops.gelu_tanh_forward(GeluArgs{xs, y.data(), t, n});
        ops.gelu_tanh_backward(GeluBackwardArgs{xs, dys, dx.data(), t, n});
        ops.gelu_tanh_forward(GeluArgs{in_place.data(), in_place.data(), t, n});                  // y may be x
        ops.gelu_tanh_backward(GeluBackwardArgs{xs, dx_is_dy.data(), dx_is_dy.data(), t, n});     // dx may be dy
        ops.gelu_tanh_backward(GeluBackwardArgs{dx_is_x.data(), dys, dx_is_x.data(), t, n});      // or x
        size_t wrong = 0, nan_mismatch = 0;
        std::ostringstream first;
        for (size_t i = 0; i < size_t(n); ++i) {
          const float xv = widen(xs[i]);
          const uint16_t ry = round(tmath::gelu_tanh(xv)), rdx = round(widen(dys[i]) * tmath::gelu_tanh_grad(xv));
          const bool bad = !same16(ry, y[i]) || !same16(rdx, dx[i]) || !same16(ry, in_place[i]) ||
                           !same16(rdx, dx_is_dy[i]) || !same16(rdx, dx_is_x[i]);
          if (bad && wrong == 0)
            first << "x 0x" << std::hex << xs[i] << " dy 0x" << dys[i] << ": gelu 0x" << y[i] << " vs 0x" << ry
                  << ", dy * gelu' 0x" << dx[i] << " vs 0x" << rdx;
          wrong += bad;
          nan_mismatch += (is_nan(ry) != is_nan(y[i])) + (is_nan(rdx) != is_nan(dx[i]));
        }
        INFO(dtype_name(t) << ", " << n << " elements from offset " << off << ": " << first.str());
        CHECK(wrong == 0);
        CHECK(nan_mismatch == 0);
      }
  }
}

// The causal softmax of one row as transformer_args.h specifies it, scalar: lanes of kRowLanes in
// increasing order, the butterfly tree, tmath::exp_f32, no contraction (this file has none either:
// the products and sums below are separate statements).
namespace {
float spec_lane(const std::vector<float>& v, int64_t n, float init, bool max) {
  float p[kRowLanes];
  for (float& x : p) x = init;
  for (int64_t j = 0; j < n; ++j) {
    float& a = p[j % kRowLanes];
    a = max ? std::fmax(a, v[size_t(j)]) : a + v[size_t(j)];
  }
  return max ? tmath::lane_tree(p, [](float a, float b) { return std::fmax(a, b); })
             : tmath::lane_tree(p, [](float a, float b) { return a + b; });
}
}  // namespace

TEST_CASE("tops causal_softmax: the op and every kernel of this CPU give the scalar specification's bits", "[tops]") {
  cpu::CpuOps ops;
  const auto& ks = cpu::available_row_kernels();
  std::string ran;
  for (const auto& k : ks) ran += std::string(ran.empty() ? "" : ", ") + k.isa;
  WARN("softmax row kernels checked against the scalar specification: " << ran);
  Rng rng(91);
  for (int64_t T : {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 45, 48, 64, 71, 100}) {
    const int64_t batch = 3, rows = batch * T;
    std::vector<float> s(size_t(rows * T)), dp(size_t(rows * T));
    for (auto& x : s) x = float(rng.normal() * 4.0);
    for (auto& x : dp) x = float(rng.normal());
    if (T > 5) s[size_t(2 * T + 1)] = -INFINITY, s[size_t(3 * T + 2)] = 1e30f, s[size_t(4 * T)] = -0.0f;
    if (T > 8) s[size_t(6 * T + 3)] = NAN;  // row 6: a NaN row
    const float scale = 0.125f;
    std::vector<float> p(s.size()), ds(s.size());
    ops.causal_softmax_forward(CausalSoftmaxArgs{batch, T, scale, s.data(), DType::F32, p.data(), DType::F32});
    ops.causal_softmax_backward(
        CausalSoftmaxBackwardArgs{batch, T, scale, p.data(), DType::F32, dp.data(), DType::F32, ds.data(), DType::F32});
    size_t wrong = 0;
    std::vector<size_t> wrong_kernel(ks.size(), 0);
    std::ostringstream first;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t n = r % T + 1;
      const float* srow = s.data() + r * T;
      const float* prow = p.data() + r * T;
      const float* dprow = dp.data() + r * T;
      std::vector<float> v(static_cast<size_t>(n)), prod(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) v[size_t(j)] = scale * srow[j];
      const float m = spec_lane(v, n, -INFINITY, true);
      for (int64_t j = 0; j < n; ++j) v[size_t(j)] = tmath::exp_f32(v[size_t(j)] - m);
      const float sum = spec_lane(v, n, 0.0f, false);
      for (int64_t j = 0; j < n; ++j) v[size_t(j)] = v[size_t(j)] / sum;
      for (int64_t j = 0; j < n; ++j) prod[size_t(j)] = dprow[j] * prow[j];
      const float dot = spec_lane(prod, n, 0.0f, false);
      std::vector<float> want_ds(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) want_ds[size_t(j)] = tmath::softmax_ds(scale, prow[j], dprow[j], dot);
      for (int64_t j = 0; j < T; ++j) {  // the op, zeros above the diagonal included
        const float want_p = j < n ? v[size_t(j)] : 0.0f, want_d = j < n ? want_ds[size_t(j)] : 0.0f;
        const bool bad = !same(want_p, prow[j]) || !same(want_d, ds[size_t(r * T + j)]);
        if (bad && wrong == 0)
          first << "T " << T << " row " << r << " col " << j << ": p " << prow[j] << " vs " << want_p << ", ds "
                << ds[size_t(r * T + j)] << " vs " << want_d;
        wrong += bad;
      }
      for (size_t k = 0; k < ks.size(); ++k) {  // each kernel set on the row, and in place
        std::vector<float> pk(size_t(n), -7.0f), dsk(size_t(n), -7.0f), in_place(srow, srow + n), dp_in_place(dprow, dprow + n);
        float stats[2] = {-7.0f, -7.0f};
        ks[k].softmax_forward(srow, scale, pk.data(), n, stats);
        ks[k].softmax_forward(in_place.data(), scale, in_place.data(), n, nullptr);
        ks[k].softmax_backward(prow, dprow, scale, dsk.data(), n);
        ks[k].softmax_backward(prow, dp_in_place.data(), scale, dp_in_place.data(), n);
        for (int64_t j = 0; j < n; ++j) {
          const bool bad = !same(v[size_t(j)], pk[size_t(j)]) || !same(v[size_t(j)], in_place[size_t(j)]) ||
                           !same(m, stats[0]) || !same(sum, stats[1]) ||
                           !same(want_ds[size_t(j)], dsk[size_t(j)]) || !same(want_ds[size_t(j)], dp_in_place[size_t(j)]);
          if (bad && wrong_kernel[k] == 0)
            first << " | " << ks[k].isa << ": T " << T << " row " << r << " col " << j << ": p " << pk[size_t(j)]
                  << " vs " << v[size_t(j)] << ", ds " << dsk[size_t(j)] << " vs " << want_ds[size_t(j)];
          wrong_kernel[k] += bad;
        }
      }
    }
    INFO(first.str());
    CHECK(wrong == 0);
    for (size_t k = 0; k < ks.size(); ++k) {
      INFO(ks[k].isa);
      CHECK(wrong_kernel[k] == 0);
    }
  }
}

// The BF16 matmul attention's softmax rows (row_kernels.h, the sets that have them): the scalar
// set's FP32 row kernels' values and statistics, rounded once (float_to_bf16_bits), bit for bit;
// softmax_probs_bf16 from those statistics; softmax_backward_bf16 against softmax_backward on the
// widened probabilities. Rows of every length class (the partial last vector, several chunks of
// the 32 lanes), scores with NaN, -inf, 1e30 and -0, and rows spread so widely that most
// probabilities are subnormal floats or round to BF16 subnormals or zero.
TEST_CASE("tops causal_softmax BF16 rows: the attention's kernels give the FP32 row kernels' bits, rounded once",
          "[tops]") {
  const auto& ks = cpu::available_row_kernels();
  const cpu::RowKernels& spec = ks.front();
  REQUIRE(std::string(spec.isa) == "scalar");
  const auto is_nan = [](uint16_t b) { return (b & 0x7fffu) > 0x7f80u; };
  const auto same16 = [&](uint16_t a, uint16_t b) { return a == b || (is_nan(a) && is_nan(b)); };
  Rng rng(97);
  std::string ran;
  for (const cpu::RowKernels& k : ks) {
    if (!k.softmax_forward_bf16) continue;
    REQUIRE((k.softmax_probs_bf16 && k.softmax_backward_bf16));
    ran += std::string(ran.empty() ? "" : ", ") + k.isa;
    size_t rows = 0, subnormal = 0;
    for (int64_t n : {1, 2, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 257, 1024, 4096}) {
      // kinds 0-3 once each; at n = 4096 kind 0 512 times more (2M probabilities: a quotient a
      // ulp off in FP32 changes its BF16 rounding about once in 2^16)
      for (int kind = 0; kind < (n == 4096 ? 516 : 4); ++kind) {
        std::vector<float> s(static_cast<size_t>(n)), dp(static_cast<size_t>(n));
        for (auto& x : s) x = float(rng.normal() * (kind == 3 ? 400.0 : 4.0));  // kind 3: widely spread
        for (auto& x : dp) x = float(rng.normal());
        if (kind == 1 && n > 3) s[1] = -INFINITY, s[2] = 1e30f, s[size_t(n - 1)] = -0.0f;
        if (kind == 2) s[size_t(n / 2)] = NAN;
        const float scale = 0.125f;
        std::vector<float> v(s.size()), ds(s.size());
        float want_stats[2], stats[2] = {-7.0f, -7.0f};
        spec.softmax_forward(s.data(), scale, v.data(), n, want_stats);
        std::vector<uint16_t> want_p(s.size()), p(s.size(), 0x1234), p_saved(s.size(), 0x1234);
        for (size_t j = 0; j < s.size(); ++j) want_p[j] = float_to_bf16_bits(v[j]);
        std::vector<float> work(s);  // the forward kernel overwrites its scores
        k.softmax_forward_bf16(work.data(), scale, p.data(), n, stats);
        k.softmax_probs_bf16(s.data(), scale, want_stats[0], want_stats[1], p_saved.data(), n);
        std::vector<float> pw(s.size());  // the rounded probabilities, widened: the backward's P
        for (size_t j = 0; j < s.size(); ++j) pw[j] = bf16_bits_to_float(want_p[j]);
        spec.softmax_backward(pw.data(), dp.data(), scale, ds.data(), n);
        std::vector<uint16_t> ds16(s.size(), 0x1234);
        k.softmax_backward_bf16(want_p.data(), dp.data(), scale, ds16.data(), n);
        size_t wrong = 0;
        std::ostringstream first;
        for (size_t j = 0; j < s.size(); ++j) {
          const uint16_t want_ds = float_to_bf16_bits(ds[j]);
          const bool bad = !same16(want_p[j], p[j]) || !same16(want_p[j], p_saved[j]) || !same16(want_ds, ds16[j]);
          if (bad && wrong == 0)
            first << "n " << n << " kind " << kind << " col " << j << ": p 0x" << std::hex << p[j] << " / 0x"
                  << p_saved[j] << " vs 0x" << want_p[j] << ", ds 0x" << ds16[j] << " vs 0x" << want_ds;
          wrong += bad;
          subnormal += v[j] != 0.0f && std::fabs(v[j]) < std::numeric_limits<float>::min();
        }
        INFO(k.isa << ": " << first.str());
        CHECK(wrong == 0);
        CHECK((same(want_stats[0], stats[0]) && same(want_stats[1], stats[1])));
        ++rows;
      }
    }
    INFO(k.isa << ": " << rows << " rows, " << subnormal << " subnormal probabilities");
    CHECK(subnormal > 50);  // the widely spread rows reach them (105 with this seed)
  }
  WARN("BF16 softmax rows checked against the scalar kernels rounded: "
       << (ran.empty() ? "none (no kernel set of this CPU has them; the BF16 matmul attention does not run here)" : ran));
}

// softmax_xent (backend/ops_args.h): the specification written out here from the scalar functions,
// bit for bit at 1, 2 and 3 threads (the kernel set is the widest this CPU has), and a double
// reference within FP32 rounding. Rows with a NaN in column 0 or elsewhere, a tied maximum, -0 and
// +0 as the maximum, -inf; vocabularies from 1 column to GPT-2's 50257, padded rows.
TEST_CASE("tops softmax_xent: a label outside the classes gives a NaN loss, no hit and the softmax alone as gradient",
          "[tops]") {
  cpu::CpuOps ops;
  const int64_t rows = 3, c = 40;
  Raw x(DType::F32, size_t(rows * c));
  Rng rng(98);
  for (size_t i = 0; i < x.size(); ++i) x.set(i, float(rng.normal() * 3.0));
  for (int32_t bad : {-1, int32_t(c), int32_t(1 << 30)}) {
    INFO("label " << bad);
    const std::vector<int32_t> labels{5, bad, 7};  // row 1's label is outside [0, 40)
    Raw d(DType::F32, size_t(rows * c)), d_ok(DType::F32, size_t(rows * c));
    const float scale = 8.0f;
    float loss = 0.0f, loss_ok = 0.0f;
    int32_t hits = 0, hits_ok = 0;
    const std::vector<int32_t> ok{5, 5, 7};
    for (int pass = 0; pass < 2; ++pass) {
      SoftmaxXentArgs a;
      a.logits = x.data(), a.logits_type = DType::F32, a.rows = rows, a.classes = c, a.ld_logits = c;
      a.labels = (pass ? ok : labels).data(), a.scale = &scale, a.inv_count = 0.5f;
      a.dlogits = (pass ? d_ok : d).data(), a.dlogits_type = DType::F32, a.ld_dlogits = c;
      a.loss_sum = pass ? &loss_ok : &loss, a.correct = pass ? &hits_ok : &hits;
      ops.softmax_xent(a);
    }
    CHECK(std::isnan(loss));
    CHECK(std::isfinite(loss_ok));
    CHECK(hits <= hits_ok);
    for (int64_t j = 0; j < c; ++j) {
      // Rows 0 and 2 as with a valid label; row 1 the softmax times scale * inv_count, no -1 term.
      CHECK(d.bits(size_t(j)) == d_ok.bits(size_t(j)));
      CHECK(d.bits(size_t(2 * c + j)) == d_ok.bits(size_t(2 * c + j)));
      const float want = j == 5 ? d_ok.get(size_t(c + j)) + 1.0f * scale * 0.5f : d_ok.get(size_t(c + j));
      CHECK(d.get(size_t(c + j)) == Approx(want).margin(1e-6));
      CHECK(d.get(size_t(c + j)) >= 0.0f);
    }
  }
}

TEST_CASE("tops softmax_xent: the specification's bits at any thread count, within FP32 rounding of double",
          "[tops]") {
  cpu::CpuOps ops;
  WARN("softmax_xent ran the " << cpu::active_row_kernels().isa << " softmax row kernel");
  Rng rng(97);
  for (int64_t c : {1, 2, 10, 31, 33, 65, 1000, 50257}) {
    for (DType t : kTypes) {
      INFO(dtype_name(t) << ", " << c << " classes");
      const int64_t rows = c > 1000 ? 6 : 9, ld = c + 3;  // 3 padding columns, NaN, never read or written
      Raw x(t, size_t(rows * ld));
      for (size_t i = 0; i < x.size(); ++i) x.set(i, int64_t(i) % ld < c ? float(rng.normal() * 4.0) : NAN);
      std::vector<int32_t> labels(static_cast<size_t>(rows));
      for (auto& y : labels) y = int32_t(rng.below(uint64_t(c)));
      auto el = [&](int64_t r, int64_t j) { return size_t(r * ld + j); };
      if (c >= 10) {
        x.set(el(1, 0), NAN), labels[1] = 0;                   // column 0 NaN: the hit is column 0
        x.set(el(2, 4), NAN);                                  // a NaN elsewhere: ignored by the arg-max
        x.set(el(3, 3), 50.0f), x.set(el(3, 7), 50.0f), labels[3] = 3;  // a tie: the first column
        for (int64_t j = 0; j < c; ++j) x.set(el(4, j), -1.0f - float(j % 5));
        x.set(el(4, 2), -0.0f), x.set(el(4, 5), 0.0f), labels[4] = 2;   // -0 before +0: column 2
        x.set(el(5, 6), -INFINITY), labels[5] = int32_t(c - 1);
      }
      const float scale = 1024.0f, inv = 1.0f / float(rows), gmul = scale * inv;
      // The specification.
      std::vector<float> want(size_t(rows * ld), NAN);
      double want_loss = 0.0;
      int32_t want_hits = 0;
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> v(static_cast<size_t>(c)), e(static_cast<size_t>(c));
        for (int64_t j = 0; j < c; ++j) v[size_t(j)] = x.get(el(r, j));
        const float m = spec_lane(v, c, -INFINITY, true);
        for (int64_t j = 0; j < c; ++j) e[size_t(j)] = tmath::exp_f32(v[size_t(j)] - m);
        const float sum = spec_lane(e, c, 0.0f, false);
        const int32_t y = labels[size_t(r)];
        int64_t arg = 0;  // the sequential arg-max: v_j > max moves it
        for (int64_t j = 1; j < c; ++j)
          if (v[size_t(j)] > v[size_t(arg)]) arg = j;
        want_hits += arg == y;
        want_loss += (double(m) + std::log(double(sum))) - double(v[size_t(y)]);
        Raw out(t, 1);
        for (int64_t j = 0; j < c; ++j) {
          out.set(0, ((e[size_t(j)] / sum) - (j == y ? 1.0f : 0.0f)) * gmul);  // one rounding to t
          want[el(r, j)] = out.get(0);
        }
      }
      if (c >= 10) {
        CHECK(std::isnan(want_loss));  // the NaN rows
      }
      for (int threads : {1, 2, 3}) {
        INFO(threads << " threads");
        const int saved = omp_get_max_threads();
        omp_set_num_threads(threads);
        Raw d(t, size_t(rows * ld));
        for (size_t i = 0; i < d.size(); ++i) d.set(i, NAN);
        float loss = 0.5f;
        int32_t hits = 2;
        SoftmaxXentArgs a;
        a.logits = x.data(), a.logits_type = t, a.rows = rows, a.classes = c, a.ld_logits = ld;
        a.labels = labels.data(), a.scale = &scale, a.inv_count = inv;
        a.dlogits = d.data(), a.dlogits_type = t, a.ld_dlogits = ld, a.loss_sum = &loss, a.correct = &hits;
        ops.softmax_xent(a);
        omp_set_num_threads(saved);
        CHECK(same(loss, 0.5f + float(want_loss)));
        CHECK(hits == 2 + want_hits);
        size_t wrong = 0;
        std::ostringstream first;
        for (size_t i = 0; i < d.size(); ++i) {
          const bool bad = !same(d.get(i), want[i]);
          if (bad && wrong++ == 0) first << "dlogits[" << i / size_t(ld) << "][" << i % size_t(ld) << "] " << d.get(i) << " vs " << want[i];
        }
        INFO(first.str());
        CHECK(wrong == 0);
      }
      // The double reference on the finite rows (rows 1, 2, 5 hold NaN or -inf where c >= 10).
      for (int64_t r = 0; r < rows; ++r) {
        if (c >= 10 && (r == 1 || r == 2)) continue;
        double mx = -INFINITY;
        for (int64_t j = 0; j < c; ++j) mx = std::max(mx, double(x.get(el(r, j))));
        double se = 0.0;
        for (int64_t j = 0; j < c; ++j) se += std::exp(double(x.get(el(r, j))) - mx);
        const int32_t y = labels[size_t(r)];
        for (int64_t j = 0; j < c; ++j) {
          if (std::isinf(x.get(el(r, j)))) {  // -inf: probability 0 exactly
            REQUIRE(want[el(r, j)] == 0.0f);
            continue;
          }
          const double pref = std::exp(double(x.get(el(r, j))) - mx) / se;
          const double ref = (pref - (j == y ? 1.0 : 0.0)) * gmul;
          // p: x - m rounded (a relative error of |x - m| u in the exp), exp_f32 within 2 ulp (and
          // its gradual underflow), the 32-lane sum's c / 32 + 5 roundings, the division; then the
          // subtraction, the product and the output's rounding.
          const double xm = std::fabs(double(x.get(el(r, j))) - mx);
          const double err32 = ((xm + double(c) / 32 + 9) * kU * pref + 0x1p-148 + kU * std::fabs(ref / gmul)) * gmul;
          const double tol = err32 + ops_ref::unit_roundoff(t) * (std::fabs(ref) + err32) + ops_ref::tiny_of(t);
          INFO("row " << r << " col " << j << ": " << std::hexfloat << want[el(r, j)] << " vs " << ref << ", tol " << tol << std::defaultfloat);
          REQUIRE(std::fabs(double(want[el(r, j)]) - ref) <= tol);
        }
      }
    }
  }
}

// LayerNorm forward and backward (FP32 and BF16, accumulating and not) against
// transformer_args.h's specification computed here in scalar code: the kernels' vector path must
// give its bits. BF16 data is widened, the FP32 specification applied, each result rounded once
// (the BF16 row kernels of row_kernels.h where the CPU has them, else conversions around the FP32
// path: the test says which ran).
TEST_CASE("tops layernorm: the kernels' vector path gives the scalar specification's bits, FP32 and BF16", "[tops]") {
  cpu::CpuOps ops;
  WARN("layernorm BF16 rows: " << (cpu::active_row_kernels().layernorm_forward_bf16
                                       ? std::string(cpu::active_row_kernels().isa) + " row kernels"
                                       : std::string("converted to FP32 rows")));
  Rng rng(93);
  for (const DType t : {DType::F32, DType::BF16})
    for (int64_t C : {1, 7, 8, 15, 16, 17, 31, 32, 33, 64, 100, 128, 257, 384}) {
      // 37 rows: the backward's one pass over the 16 row lanes; 5 (fewer than the lanes): two passes;
      // 1100 (C = 33, 100): three segments of row_sum's order, the last one short.
      const int64_t rows = C == 33 || C == 100 ? 1100 : C % 2 ? 37 : 5;
      INFO(dtype_name(t) << " C " << C << " rows " << rows);
      // v as the type holds it (FP32: v itself), and as an array of the type
      const auto in_type = [t](float v) { return t == DType::F32 ? v : bf16_bits_to_float(float_to_bf16_bits(v)); };
      const auto typed = [t](const std::vector<float>& v) {
        Raw r(t, v.size());
        for (size_t i = 0; i < v.size(); ++i) r.set(i, v[i]);
        return r;
      };
      const auto values = [](const Raw& r) {
        std::vector<float> v(r.size());
        for (size_t i = 0; i < v.size(); ++i) v[i] = r.get(i);
        return v;
      };
      auto random = [&](size_t n, double mean, double sd) {
        std::vector<float> v(n);
        for (auto& e : v) e = in_type(float(mean + sd * rng.normal()));
        return v;
      };
      const std::vector<float> x = random(size_t(rows * C), 1.5, 3.0), dy = random(x.size(), 0.0, 1.0),
                               gamma = random(size_t(C), 1.0, 0.3), beta = random(size_t(C), 0.0, 0.2);
      const Raw xt = typed(x), dyt = typed(dy), gt = typed(gamma), bt = typed(beta);
      Raw yt(t, x.size());
      std::vector<float> mean(static_cast<size_t>(rows)), rstd(mean.size());
      LayerNormArgs f;
      f.rows = rows, f.C = C, f.type = t, f.x = xt.data(), f.gamma = gt.data(), f.beta = bt.data();
      f.y = yt.data(), f.mean = mean.data(), f.rstd = rstd.data();
      ops.layernorm_forward(f);
      const std::vector<float> y = values(yt);
      for (bool acc : {false, true}) {
        const std::vector<float> dx0 = random(x.size(), 0.0, 1.0), dg0 = random(gamma.size(), 0.0, 1.0),
                                 db0 = random(gamma.size(), 0.0, 1.0);
        Raw dxt = typed(dx0), dgt = typed(dg0), dbt = typed(db0);
        LayerNormBackwardArgs b;
        b.rows = rows, b.C = C, b.type = t, b.x = xt.data(), b.dy = dyt.data(), b.gamma = gt.data();
        b.mean = mean.data(), b.rstd = rstd.data(), b.dx = dxt.data(), b.accumulate_dx = acc;
        b.dgamma = dgt.data(), b.dbeta = dbt.data(), b.accumulate_dparams = acc;
        ops.layernorm_backward(b);
        const std::vector<float> dx = values(dxt), dg = values(dgt), db = values(dbt);
        size_t wrong = 0;
        std::ostringstream first;
        auto expect = [&](const char* what, int64_t r, int64_t j, float got, float want) {
          if (f32_bits(got) != f32_bits(want) && wrong++ == 0)
            first << what << " row " << r << " col " << j << ": " << got << " vs " << want;
        };
        std::vector<float> prods(x.size());  // n_rj * dy_rj, dgamma's terms
        for (int64_t r = 0; r < rows; ++r) {
          std::vector<float> xr(x.begin() + r * C, x.begin() + (r + 1) * C), d2(gamma.size());
          const float m = spec_lane(xr, C, 0.0f, false) / float(C);
          for (int64_t j = 0; j < C; ++j) {
            const float d = xr[size_t(j)] - m;
            d2[size_t(j)] = d * d;
          }
          const float var = spec_lane(d2, C, 0.0f, false) / float(C);
          const float rs = tmath::ln_rstd(var, kLayerNormEps);
          if (!acc) expect("mean", r, 0, mean[size_t(r)], m), expect("rstd", r, 0, rstd[size_t(r)], rs);
          std::vector<float> n(gamma.size()), dn(gamma.size()), dnn(gamma.size());
          for (int64_t j = 0; j < C; ++j) {
            n[size_t(j)] = tmath::ln_norm(xr[size_t(j)], m, rs);
            if (!acc)
              expect("y", r, j, y[size_t(r * C + j)], in_type(tmath::ln_out(n[size_t(j)], gamma[size_t(j)], beta[size_t(j)])));
            dn[size_t(j)] = gamma[size_t(j)] * dy[size_t(r * C + j)];
            dnn[size_t(j)] = dn[size_t(j)] * n[size_t(j)];
            prods[size_t(r * C + j)] = n[size_t(j)] * dy[size_t(r * C + j)];
          }
          const float a = spec_lane(dn, C, 0.0f, false) / float(C), bb = spec_lane(dnn, C, 0.0f, false) / float(C);
          for (int64_t j = 0; j < C; ++j) {
            const float v = tmath::ln_dx(dn[size_t(j)], a, n[size_t(j)], bb, rs);
            expect("dx", r, j, dx[size_t(r * C + j)], in_type(acc ? dx0[size_t(r * C + j)] + v : v));
          }
        }
        for (int64_t j = 0; j < C; ++j) {
          const float g = ops_ref::row_sum_order(rows, [&](int64_t r) { return prods[size_t(r * C + j)]; });
          const float bs = ops_ref::row_sum_order(rows, [&](int64_t r) { return dy[size_t(r * C + j)]; });
          expect("dgamma", -1, j, dg[size_t(j)], in_type(acc ? dg0[size_t(j)] + g : g));
          expect("dbeta", -1, j, db[size_t(j)], in_type(acc ? db0[size_t(j)] + bs : bs));
        }
        INFO("accumulate " << acc << ": " << first.str());
        CHECK(wrong == 0);
      }
    }
}

// ---------------------------------------------------------------- embedding

TEST_CASE("tops embedding_forward: one FP32 addition and one rounding, invalid tokens give NaN rows", "[tops]") {
  cpu::CpuOps ops;
  uint64_t seed = 600;
  for (DType t : kTypes) {
    const int64_t B = 3, T = 17, C = 40, V = 29, P = 20;
    INFO(dtype_name(t));
    std::vector<int32_t> tok = random_tokens(B * T, V, ++seed, 4);
    tok[5] = -1, tok[40] = int32_t(V);  // out of range
    const Raw wte = random_raw(t, size_t(V * C), ++seed), wpe = random_raw(t, size_t(P * C), ++seed, 0.1);
    Raw x(t, size_t(B * T * C) + 1);
    x.fill_bits(ops_ref::sentinel_bits(t));
    EmbeddingArgs a;
    a.B = B, a.T = T, a.C = C, a.vocab = V, a.max_positions = P, a.type = t, a.tokens = tok.data();
    a.wte = wte.data(), a.wpe = wpe.data(), a.x = x.data();
    ops.embedding_forward(a);
    Close c(t);
    for (int64_t i = 0; i < B * T; ++i)
      for (int64_t j = 0; j < C; ++j) {
        const size_t e = size_t(i * C + j);
        if (i == 5 || i == 40) {
          REQUIRE(std::isnan(x.get(e)));
          continue;
        }
        const size_t ie = size_t(tok[size_t(i)] * C + j), pe = size_t((i % T) * C + j);
        Raw spec(t, 1);
        spec.set(0, wte.get(ie) + wpe.get(pe));
        INFO("x[" << i << "][" << j << "] = " << x.get(e) << ", specification " << spec.get(0));
        REQUIRE(x.bits(e) == spec.bits(0));
        const double ref = double(wte.get(ie)) + double(wpe.get(pe));
        c(x.get(e), ref, kU * std::fabs(ref), at_index("x", i, j));
      }
    TOPS_REQUIRE_CLOSE(c);
    REQUIRE(x.bits(size_t(B * T * C)) == ops_ref::sentinel_bits(t));
  }
}

TEST_CASE("tops embedding_backward: repeated tokens in position order, dwte accumulated, dwpe written entirely",
          "[tops]") {
  cpu::CpuOps ops;
  ops.reserve_embedding(4 * 64, 11);
  uint64_t seed = 700;
  for (DType t : kTypes) {
    const int64_t B = 4, T = 64, C = 300, V = 11, P = 80;  // C > one column tile
    INFO(dtype_name(t));
    std::vector<int32_t> tok = random_tokens(B * T, V - 2, ++seed, 3);  // tokens 9 and 10 never occur
    tok[7] = -3, tok[100] = int32_t(V + 5);                              // skipped
    const Raw dx = random_raw(t, size_t(B * T * C), ++seed);
    const Raw old_wte = random_raw(t, size_t(V * C), ++seed, 4.0);
    Raw dwte = old_wte, dwpe(t, size_t(P * C));
    dwpe.fill_bits(ops_ref::sentinel_bits(t));  // every element must be written
    EmbeddingBackwardArgs a;
    a.B = B, a.T = T, a.C = C, a.vocab = V, a.max_positions = P, a.type = t, a.tokens = tok.data();
    a.dx = dx.data(), a.dwte = dwte.data(), a.dwpe = dwpe.data();
    ops.embedding_backward(a);
    const int64_t count3 = std::count(tok.begin(), tok.end(), 3);
    INFO("token 3 at " << count3 << " of " << B * T << " positions");
    REQUIRE(count3 > B * T / 3);
    Close cw(t), cp(t);
    for (int64_t v = 0; v < V; ++v)
      for (int64_t j = 0; j < C; ++j) {
        const size_t e = size_t(v * C + j);
        float acc = 0.0f;  // the specification: increasing positions from +0, then old + sum
        double ref = 0, mag = 0;
        int64_t count = 0;
        for (int64_t i = 0; i < B * T; ++i)
          if (tok[size_t(i)] == v) {
            acc += dx.get(size_t(i * C + j));
            ref += dx.get(size_t(i * C + j));
            mag += std::fabs(dx.get(size_t(i * C + j)));
            ++count;
          }
        if (count == 0) {
          REQUIRE(dwte.bits(e) == old_wte.bits(e));  // untouched
          continue;
        }
        Raw spec(t, 1);
        spec.set(0, old_wte.get(e) + acc);
        INFO("dwte[" << v << "][" << j << "] = " << dwte.get(e) << ", specification " << spec.get(0));
        REQUIRE(dwte.bits(e) == spec.bits(0));
        ref += old_wte.get(e);
        cw(dwte.get(e), ref, double(count + 2) * kU * (mag + std::fabs(old_wte.get(e))), at_index("dwte", v, j));
      }
    for (int64_t p = 0; p < P; ++p)
      for (int64_t j = 0; j < C; ++j) {
        const size_t e = size_t(p * C + j);
        if (p >= T) {
          REQUIRE(dwpe.bits(e) == 0u);  // written: +0
          continue;
        }
        float acc = 0.0f;
        double ref = 0, mag = 0;
        for (int64_t b = 0; b < B; ++b) {
          const float v = dx.get(size_t((b * T + p) * C + j));
          acc += v, ref += v, mag += std::fabs(v);
        }
        Raw spec(t, 1);
        spec.set(0, acc);
        REQUIRE(dwpe.bits(e) == spec.bits(0));
        cp(dwpe.get(e), ref, double(B + 1) * kU * mag, at_index("dwpe", p, j));
      }
    TOPS_REQUIRE_CLOSE(cw);
    TOPS_REQUIRE_CLOSE(cp);
  }
}

TEST_CASE("tops embedding_backward: every position the same token, and the reserve contract", "[tops]") {
  const int64_t B = 8, T = 32, C = 5, V = 3;
  const DType t = DType::BF16;
  std::vector<int32_t> tok(size_t(B * T), 2);
  const Raw dx = random_raw(t, size_t(B * T * C), 9);
  Raw dwte = random_raw(t, size_t(V * C), 10), dwpe(t, size_t(T * C));
  const Raw old = dwte;
  EmbeddingBackwardArgs a;
  a.B = B, a.T = T, a.C = C, a.vocab = V, a.max_positions = T, a.type = t, a.tokens = tok.data();
  a.dx = dx.data(), a.dwte = dwte.data(), a.dwpe = dwpe.data();
  cpu::CpuOps ops, few_tokens, small_vocab;
  REQUIRE_THROWS_AS(ops.embedding_backward(a), Error);  // no reserve
  few_tokens.reserve_embedding(B * T - 1, V);
  REQUIRE_THROWS_AS(few_tokens.embedding_backward(a), Error);
  small_vocab.reserve_embedding(B * T, V - 1);
  REQUIRE_THROWS_AS(small_vocab.embedding_backward(a), Error);
  ops.reserve_embedding(B * T, 1);
  ops.reserve_embedding(1, V);  // grows each bound on its own

  REQUIRE(dwte.bytes == old.bytes);
  ops.embedding_backward(a);
  for (int64_t j = 0; j < C; ++j) {
    float acc = 0.0f;
    for (int64_t i = 0; i < B * T; ++i) acc += dx.get(size_t(i * C + j));
    Raw spec(t, 1);
    spec.set(0, old.get(size_t(2 * C + j)) + acc);
    REQUIRE(dwte.bits(size_t(2 * C + j)) == spec.bits(0));
    REQUIRE(dwte.bits(size_t(j)) == old.bits(size_t(j)));
  }
  // No positions: dwpe zeros, dwte untouched, no reserve needed.
  cpu::CpuOps fresh;
  a.B = 0;
  dwpe.fill_bits(ops_ref::sentinel_bits(t));
  const Raw before = dwte;
  fresh.embedding_backward(a);
  REQUIRE(dwte.bytes == before.bytes);
  for (size_t e = 0; e < dwpe.size(); ++e) REQUIRE(dwpe.bits(e) == 0u);
  a.B = B, a.max_positions = T - 1;  // T > max_positions
  REQUIRE_THROWS_AS(ops.embedding_backward(a), Error);
}

// ---------------------------------------------------------------- determinism

// 3 threads also take the layer norm backward's two-pass path (16 lanes do not share 3 threads
// evenly), 1, 2, 4 and 16 its one-pass path (a thread's range of lanes from 16 down to 1): the
// same bits.
TEST_CASE("tops determinism: two runs and 1, 2, 3, 4 or 16 OpenMP threads give the same bits", "[tops]") {
  const DType t = DType::BF16;
  // 1100 rows: the layer norm's dgamma/dbeta over three segments of row_sum's order, the last one
  // short (one pass by segments at 1 thread, by lanes at 2, 4 and 16, two passes at 3); 2048 rows:
  // four whole segments (one pass by segments at 1, 2 and 4 threads, by lanes at 16, two at 3).
  const int64_t rows = 1100, rows2 = 2048, C = 512, batch = 4, T = 128, n = 50000, B = 4, Tt = 64, Ce = 192, V = 37;
  const Raw x = random_raw(t, size_t(rows * C), 1, 2.0, 1.5), g = random_raw(t, size_t(C), 2, 0.5, 1.0);
  const Raw b = random_raw(t, size_t(C), 3), dy = random_raw(t, size_t(rows * C), 4);
  // The 2048 rows in FP32, where a change in any lane's order shows in dgamma's bits (rounded to
  // BF16 it mostly would not).
  const DType f = DType::F32;
  const Raw x2 = random_raw(f, size_t(rows2 * C), 14, 2.0, 1.5), dy2 = random_raw(f, size_t(rows2 * C), 15);
  const Raw g2 = random_raw(f, size_t(C), 16, 0.5, 1.0), b2 = random_raw(f, size_t(C), 17);
  const Raw s = random_raw(DType::F32, size_t(batch * T * T), 5, 4.0), dp = random_raw(t, size_t(batch * T * T), 6);
  const Raw gx = random_raw(t, size_t(n), 7, 3.0), gdy = random_raw(t, size_t(n), 8);
  const std::vector<int32_t> tok = random_tokens(B * Tt, V, 9, 5);
  const Raw edx = random_raw(t, size_t(B * Tt * Ce), 10), wte0 = random_raw(t, size_t(V * Ce), 11);
  const Raw wpe = random_raw(t, size_t(Tt * Ce), 12);

  auto run_all = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    cpu::CpuOps ops;
    ops.reserve_embedding(B * Tt, V);
    std::vector<Raw> out;
    const LnRun fwd = run_ln_forward(ops, x, g, b, rows, C);
    Raw stats(DType::F32, fwd.mean.size() * 2);
    std::copy(fwd.mean.begin(), fwd.mean.end(), reinterpret_cast<float*>(stats.data()));
    std::copy(fwd.rstd.begin(), fwd.rstd.end(), reinterpret_cast<float*>(stats.data()) + fwd.mean.size());
    const Raw old_dx = random_raw(t, size_t(rows * C), 13);
    const LnGrads grads = run_ln_backward(ops, dy, x, g, fwd, rows, C, &old_dx, nullptr, nullptr);
    const LnGrads grads2 = run_ln_backward(ops, dy2, x2, g2, run_ln_forward(ops, x2, g2, b2, rows2, C), rows2, C,
                                           nullptr, nullptr, nullptr);
    const Raw p = run_softmax(ops, s, t, batch, T, 0.125f);
    const Raw ds = run_softmax_backward(ops, p, dp, t, batch, T, 0.125f);
    Raw y(t, size_t(n)), gd(t, size_t(n));
    ops.gelu_tanh_forward(GeluArgs{gx.data(), y.data(), t, n});
    ops.gelu_tanh_backward(GeluBackwardArgs{gx.data(), gdy.data(), gd.data(), t, n});
    Raw ex(t, size_t(B * Tt * Ce));
    EmbeddingArgs ea;
    ea.B = B, ea.T = Tt, ea.C = Ce, ea.vocab = V, ea.max_positions = Tt, ea.type = t, ea.tokens = tok.data();
    ea.wte = wte0.data(), ea.wpe = wpe.data(), ea.x = ex.data();
    ops.embedding_forward(ea);
    Raw dwte = wte0, dwpe(t, size_t(Tt * Ce));
    EmbeddingBackwardArgs eb;
    eb.B = B, eb.T = Tt, eb.C = Ce, eb.vocab = V, eb.max_positions = Tt, eb.type = t, eb.tokens = tok.data();
    eb.dx = edx.data(), eb.dwte = dwte.data(), eb.dwpe = dwpe.data();
    ops.embedding_backward(eb);
    out = {fwd.y, stats, grads.dx, grads.dgamma, grads.dbeta, grads2.dx, grads2.dgamma, grads2.dbeta, p, ds, y, gd,
           ex, dwte, dwpe};
    omp_set_num_threads(saved);
    return out;
  };
  const char* names[] = {"ln y", "ln mean/rstd", "ln dx", "ln dgamma", "ln dbeta", "ln dx (2048 rows)",
                         "ln dgamma (2048 rows)", "ln dbeta (2048 rows)", "softmax P", "softmax dS",
                         "gelu y", "gelu dx", "embedding x", "dwte", "dwpe"};
  const auto one = run_all(1), two = run_all(2), again = run_all(2), three = run_all(3);
  const auto four = run_all(4), sixteen = run_all(16);
  REQUIRE(one.size() == std::size(names));
  for (size_t k = 0; k < one.size(); ++k) {
    INFO(names[k]);
    REQUIRE(one[k].bytes == two[k].bytes);
    REQUIRE(two[k].bytes == again[k].bytes);
    REQUIRE(one[k].bytes == three[k].bytes);
    REQUIRE(one[k].bytes == four[k].bytes);
    REQUIRE(one[k].bytes == sixteen[k].bytes);
  }
}
