// Tests of the bulk 16-bit conversions (core/convert.h) and of the scalar reference they must match
// (core/half.h): every 16-bit pattern, hand-computed edge cases, an independent double-precision
// reference on millions of random floats, and every SIMD path against the scalar one, bit for bit.
#include <catch2/catch.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/convert.h"
#include "core/error.h"
#include "core/half.h"
#include "core/rng.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define AMP_TEST_X86 1
#endif

using namespace amp;

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

std::string hex(uint32_t v, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%0*x", digits, v);
  return buf;
}

// Counts failures inside big loops and keeps the first one for the report, so that one CHECK
// covers millions of values without flooding the output.
struct Mismatches {
  size_t count = 0;
  std::string first;
  void add(const std::string& what) {
    if (count++ == 0) first = what;
  }
};

#define CHECK_NO_MISMATCH(m)            \
  do {                                  \
    INFO("first mismatch: " << (m).first); \
    CHECK((m).count == 0);              \
  } while (0)

// ---- independent reference (does not use core/half.h) --------------------------------------
// The binary format with `mant_bits` fraction bits and `exp_bits` exponent bits: half is (10, 5),
// bf16 is (7, 8). Rounding works on exact doubles: the two representable neighbours of |f| are
// multiples of the quantum (ulp) of its binade, and the nearer one wins, ties to the even multiple.
uint16_t independent_round(float f, int mant_bits, int exp_bits) {
  const uint32_t u = bits_of(f);
  const uint32_t sign = (u >> 31) << (mant_bits + exp_bits);
  const int bias = (1 << (exp_bits - 1)) - 1;
  const uint32_t exp_ones = ((1u << exp_bits) - 1u) << mant_bits;
  if (std::isnan(f)) {
    // IEEE convertFormat: the result is quiet, the payload's top bits are kept.
    const uint32_t payload = (u & 0x7fffffu) >> (23 - mant_bits);
    return static_cast<uint16_t>(sign | exp_ones | (1u << (mant_bits - 1)) | payload);
  }
  if (std::isinf(f)) return static_cast<uint16_t>(sign | exp_ones);
  const double a = std::fabs(static_cast<double>(f));
  if (a == 0.0) return static_cast<uint16_t>(sign);
  const int emin = 1 - bias;
  int e = 0;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  const int binade = std::max(e - 1, emin);
  const double quantum = std::ldexp(1.0, binade - mant_bits);
  const double k = std::floor(a / quantum);
  const double below = k * quantum;
  const double above = (k + 1.0) * quantum;
  double r;
  if (a - below < above - a)
    r = below;
  else if (a - below > above - a)
    r = above;
  else
    r = std::fmod(k, 2.0) == 0.0 ? below : above;
  const double max_finite = std::ldexp(2.0 - std::ldexp(1.0, -mant_bits), bias);
  if (r > max_finite) return static_cast<uint16_t>(sign | exp_ones);
  if (r < std::ldexp(1.0, emin))  // subnormal or zero: a count of the smallest quantum
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(r / std::ldexp(1.0, emin - mant_bits)));
  int re = 0;
  const double fr = std::frexp(r, &re);  // r = fr * 2^re, fr in [0.5, 1)
  const uint32_t biased = static_cast<uint32_t>(re - 1 + bias);
  const uint32_t mant = static_cast<uint32_t>((fr * 2.0 - 1.0) * std::ldexp(1.0, mant_bits));
  return static_cast<uint16_t>(sign | (biased << mant_bits) | mant);
}

uint16_t independent_f32_to_f16(float f) { return independent_round(f, 10, 5); }
uint16_t independent_f32_to_bf16(float f) { return independent_round(f, 7, 8); }

// The value of a finite 16-bit pattern from its fields.
double independent_value(uint16_t h, int mant_bits, int exp_bits) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const int e = (h >> mant_bits) & ((1 << exp_bits) - 1);
  const int m = h & ((1 << mant_bits) - 1);
  const double mag = e == 0 ? std::ldexp(m, 1 - bias - mant_bits)
                            : std::ldexp(m + (1 << mant_bits), e - bias - mant_bits);
  return (h >> 15) ? -mag : mag;
}

// ---- test data -----------------------------------------------------------------------------

// Random float bits biased towards the places where conversions go wrong.
uint32_t random_float_bits(Rng& rng) {
  const uint64_t v = rng.next_u64();
  uint32_t u = static_cast<uint32_t>(v);
  const uint32_t pick = static_cast<uint32_t>(v >> 32);
  switch (pick % 10) {
    case 0: u &= 0x807fffffu; break;  // float subnormal or zero
    case 1: u |= 0x7f800000u; break;  // NaN (quiet or signalling) or inf
    case 2:                           // half subnormal range, 2^-25 .. 2^-14
      u = (u & 0x807fffffu) | ((102u + (pick >> 8) % 13u) << 23);
      break;
    case 3: u = (u & 0x807fffffu) | ((142u + (pick >> 8) % 2u) << 23); break;  // near 65504
    case 4: u = (u & ~0x1fffu) | 0x1000u; break;  // f16 tie (then odd or even kept bit)
    case 5: u = (u & ~0xffffu) | 0x8000u; break;  // bf16 tie
    case 6: u = (u & 0x807fffffu) | (0xfeu << 23); break;  // near FLT_MAX (bf16 overflow)
    default: break;
  }
  return u;
}

uint16_t random_16_bits(Rng& rng) {
  const uint64_t v = rng.next_u64();
  uint16_t h = static_cast<uint16_t>(v);
  switch ((v >> 32) % 6) {
    case 0: h |= 0x7c00; break;        // f16 NaN/inf (and a bf16 large value)
    case 1: h |= 0x7f80; break;        // bf16 NaN/inf
    case 2: h &= 0x83ff; break;        // f16 subnormal
    case 3: h &= 0x807f; break;        // bf16 subnormal
    default: break;
  }
  return h;
}

std::vector<float> random_floats(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& f : v) f = float_of(random_float_bits(rng));
  return v;
}

std::vector<uint16_t> random_16(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint16_t> v(n);
  for (auto& h : v) h = random_16_bits(rng);
  return v;
}

// Every path plus the public entry points, which must behave as the active path.
std::vector<ConvertKernels> all_paths() {
  std::vector<ConvertKernels> ks = available_convert_kernels();
  ks.push_back({"public", f32_to_f16, f16_to_f32, f32_to_bf16, bf16_to_f32,
                [](const uint16_t* x, float* acc, size_t n) { widen_add(x, DType::F16, acc, n); },
                [](const uint16_t* x, float* acc, size_t n) { widen_add(x, DType::BF16, acc, n); }});
  return ks;
}

// f32 -> 16 on one value through every path, alone (tail code) and in a run of 40 copies
// (vector body plus tail), against the hand-computed bits.
void check_narrow_everywhere(uint32_t in, uint16_t expected, bool bf16) {
  const float f = float_of(in);
  INFO("input " << hex(in, 8) << (bf16 ? " -> bf16" : " -> f16") << ", expected "
                << hex(expected, 4));
  CHECK((bf16 ? float_to_bf16_bits(f) : float_to_half_bits(f)) == expected);
  CHECK((bf16 ? independent_f32_to_bf16(f) : independent_f32_to_f16(f)) == expected);
  const std::vector<float> src(40, f);
  for (const auto& k : all_paths()) {
    INFO("path " << k.name);
    const auto fn = bf16 ? k.f32_to_bf16 : k.f32_to_f16;
    uint16_t one = 0x1234;
    fn(src.data(), &one, 1);
    CHECK(one == expected);
    std::vector<uint16_t> out(40, 0x1234);
    fn(src.data(), out.data(), out.size());
    CHECK(std::count(out.begin(), out.end(), expected) == 40);
  }
}

constexpr uint16_t kSentinel = 0xa5c3;

}  // namespace

// ---- the scalar reference and the paths on every 16-bit pattern ------------------------------

TEST_CASE("every f16 pattern round-trips through float on every path", "[convert]") {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  for (const auto& k : all_paths()) {
    INFO("path " << k.name);
    std::vector<float> f(65536);
    std::vector<uint16_t> back(65536);
    k.f16_to_f32(all.data(), f.data(), all.size());
    k.f32_to_f16(f.data(), back.data(), f.size());
    Mismatches value, trip, nan;
    size_t nans = 0;
    for (uint32_t h = 0; h < 65536; ++h) {
      const uint32_t fb = bits_of(f[h]);
      const bool is_nan_pattern = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
      if (is_nan_pattern) {
        ++nans;
        // Quiet NaN, same sign, the 9 payload bits below the quiet bit kept in place.
        const uint32_t want = ((h & 0x8000u) << 16) | 0x7fc00000u | ((h & 0x1ffu) << 13);
        if (!std::isnan(f[h]) || fb != want)
          nan.add(hex(h, 4) + " -> " + hex(fb, 8) + ", want " + hex(want, 8));
        if (back[h] != (h | 0x200u))
          trip.add(hex(h, 4) + " -> " + hex(back[h], 4) + ", want " + hex(h | 0x200u, 4));
        continue;
      }
      const bool is_inf = (h & 0x7fff) == 0x7c00;
      const double want = is_inf ? ((h & 0x8000) ? -HUGE_VAL : HUGE_VAL)
                                 : independent_value(static_cast<uint16_t>(h), 10, 5);
      if (static_cast<double>(f[h]) != want || std::signbit(f[h]) != ((h & 0x8000) != 0))
        value.add(hex(h, 4) + " -> " + hex(fb, 8));
      if (back[h] != h) trip.add(hex(h, 4) + " -> " + hex(back[h], 4));
    }
    CHECK(nans == 2 * 1023);
    CHECK_NO_MISMATCH(value);
    CHECK_NO_MISMATCH(trip);
    CHECK_NO_MISMATCH(nan);
  }
}

TEST_CASE("every bf16 pattern round-trips through float on every path", "[convert]") {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  for (const auto& k : all_paths()) {
    INFO("path " << k.name);
    std::vector<float> f(65536);
    std::vector<uint16_t> back(65536);
    k.bf16_to_f32(all.data(), f.data(), all.size());
    k.f32_to_bf16(f.data(), back.data(), f.size());
    Mismatches value, trip, nan;
    size_t nans = 0;
    for (uint32_t b = 0; b < 65536; ++b) {
      const uint32_t fb = bits_of(f[b]);
      if ((b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0) {
        ++nans;
        const uint32_t want = (b << 16) | 0x400000u;  // quiet bit set, the rest unchanged
        if (!std::isnan(f[b]) || fb != want)
          nan.add(hex(b, 4) + " -> " + hex(fb, 8) + ", want " + hex(want, 8));
        if (back[b] != (b | 0x40u))
          trip.add(hex(b, 4) + " -> " + hex(back[b], 4) + ", want " + hex(b | 0x40u, 4));
        continue;
      }
      const bool is_inf = (b & 0x7fff) == 0x7f80;
      const double want = is_inf ? ((b & 0x8000) ? -HUGE_VAL : HUGE_VAL)
                                 : independent_value(static_cast<uint16_t>(b), 7, 8);
      if (static_cast<double>(f[b]) != want || std::signbit(f[b]) != ((b & 0x8000) != 0))
        value.add(hex(b, 4) + " -> " + hex(fb, 8));
      if (back[b] != b) trip.add(hex(b, 4) + " -> " + hex(back[b], 4));
    }
    CHECK(nans == 2 * 127);
    CHECK_NO_MISMATCH(value);
    CHECK_NO_MISMATCH(trip);
    CHECK_NO_MISMATCH(nan);
  }
}

// ---- hand-computed edge cases --------------------------------------------------------------

TEST_CASE("float to f16 edge cases", "[convert]") {
  struct Case {
    uint32_t in;
    uint16_t out;
    const char* what;
  };
  const Case cases[] = {
      {0x477fe000, 0x7bff, "65504, largest finite"},
      {0xc77fe000, 0xfbff, "-65504"},
      {0x477fefff, 0x7bff, "65519.996, just below the overflow threshold"},
      {0x477ff000, 0x7c00, "65520, the threshold: tie to even is inf"},
      {0xc77ff000, 0xfc00, "-65520"},
      {0x47800000, 0x7c00, "65536"},
      {0x7f7fffff, 0x7c00, "FLT_MAX"},
      {0x33000000, 0x0000, "2^-25, half the smallest subnormal: tie to even zero"},
      {0xb3000000, 0x8000, "-2^-25 keeps its sign"},
      {0x33000001, 0x0001, "just above 2^-25"},
      {0x32ffffff, 0x0000, "just below 2^-25"},
      {0x33800000, 0x0001, "2^-24, smallest subnormal"},
      {0x33c00000, 0x0002, "1.5 * 2^-24: subnormal tie, up to even"},
      {0x34200000, 0x0002, "2.5 * 2^-24: subnormal tie, down to even"},
      {0x341fffff, 0x0002, "just below 2.5 * 2^-24"},
      {0x34200001, 0x0003, "just above 2.5 * 2^-24"},
      {0x387fa000, 0x03fe, "1022.5 * 2^-24: tie, down to even"},
      {0x387fe000, 0x0400, "1023.5 * 2^-24: tie, up into the smallest normal"},
      {0x38800000, 0x0400, "2^-14, smallest normal"},
      {0x3f801000, 0x3c00, "1 + 2^-11: normal tie, down to even"},
      {0x3f803000, 0x3c02, "1 + 3 * 2^-11: normal tie, up to even"},
      {0x3f801001, 0x3c01, "just above 1 + 2^-11"},
      {0x3f802fff, 0x3c01, "just below 1 + 3 * 2^-11"},
      {0x45001000, 0x6800, "2049: tie, down to 2048"},
      {0x45003000, 0x6802, "2051: tie, up to 2052"},
      {0x00000000, 0x0000, "+0"},
      {0x80000000, 0x8000, "-0"},
      {0x00000001, 0x0000, "smallest float subnormal"},
      {0x807fffff, 0x8000, "largest negative float subnormal"},
      {0x7f800000, 0x7c00, "+inf"},
      {0xff800000, 0xfc00, "-inf"},
      {0x7fc00000, 0x7e00, "quiet NaN"},
      {0xffc00000, 0xfe00, "negative quiet NaN"},
      {0x7fc02000, 0x7e01, "quiet NaN, payload in the kept bits"},
      {0x7fffffff, 0x7fff, "quiet NaN, all payload bits"},
      {0x7f800001, 0x7e00, "signalling NaN, payload only in dropped bits: quieted, not inf"},
      {0x7fa00000, 0x7f00, "signalling NaN with a kept payload bit"},
      {0xff802000, 0xfe01, "negative signalling NaN"},
      {0xffbfe000, 0xffff, "negative signalling NaN, all kept payload bits"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    check_narrow_everywhere(c.in, c.out, false);
  }
  // The literals the brief states, through the float type itself.
  CHECK(float_to_half_bits(65504.0f) == 0x7bff);
  CHECK(float_to_half_bits(65519.996f) == 0x7bff);
  CHECK(float_to_half_bits(65520.0f) == 0x7c00);
  CHECK(float_to_half_bits(std::ldexp(1.0f, -25)) == 0x0000);
  CHECK(float_to_half_bits(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
}

TEST_CASE("float to bf16 edge cases, float subnormals not flushed", "[convert]") {
  struct Case {
    uint32_t in;
    uint16_t out;
    const char* what;
  };
  const Case cases[] = {
      {0x7f7f0000, 0x7f7f, "largest finite bf16"},
      {0xff7f0000, 0xff7f, "negative largest finite bf16"},
      {0x7f7f7fff, 0x7f7f, "just below the overflow threshold"},
      {0x7f7f8000, 0x7f80, "the threshold: tie to even is inf"},
      {0xff7f8000, 0xff80, "negative threshold"},
      {0x7f7fffff, 0x7f80, "FLT_MAX"},
      {0x3f808000, 0x3f80, "1 + 2^-8: tie, down to even"},
      {0x3f818000, 0x3f82, "1 + 3 * 2^-8: tie, up to even"},
      {0x3f808001, 0x3f81, "just above a tie"},
      {0x3f807fff, 0x3f80, "just below a tie"},
      {0x00000001, 0x0000, "smallest float subnormal"},
      {0x80000001, 0x8000, "smallest negative float subnormal"},
      {0x00008000, 0x0000, "subnormal tie, down to even zero"},
      {0x00008001, 0x0001, "just above it: smallest bf16 subnormal"},
      {0x00010000, 0x0001, "smallest bf16 subnormal, exact"},
      {0x00018000, 0x0002, "subnormal tie, up to even"},
      {0x00028000, 0x0002, "subnormal tie, down to even"},
      {0x00400000, 0x0040, "2^-127"},
      {0x007e8000, 0x007e, "tie below the largest subnormal, down to even"},
      {0x007f8000, 0x0080, "tie, up into the smallest normal"},
      {0x007fffff, 0x0080, "largest float subnormal rounds to the smallest normal"},
      {0x807fffff, 0x8080, "negative largest float subnormal"},
      {0x00800000, 0x0080, "smallest normal float"},
      {0x00000000, 0x0000, "+0"},
      {0x80000000, 0x8000, "-0"},
      {0x7f800000, 0x7f80, "+inf"},
      {0xff800000, 0xff80, "-inf"},
      {0x7fc00000, 0x7fc0, "quiet NaN"},
      {0xffc00000, 0xffc0, "negative quiet NaN"},
      {0x7fffffff, 0x7fff, "quiet NaN, all payload bits"},
      {0x7f800001, 0x7fc0, "signalling NaN, payload only in dropped bits: quieted, not inf"},
      {0x7f80ffff, 0x7fc0, "signalling NaN that would round up if treated as a number"},
      {0x7fa00000, 0x7fe0, "signalling NaN with a kept payload bit"},
      {0xff810000, 0xffc1, "negative signalling NaN"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    check_narrow_everywhere(c.in, c.out, true);
  }
}

// ---- scalar reference against the independent one -----------------------------------------

TEST_CASE("scalar reference matches an independent RNE on millions of floats", "[convert]") {
  Rng rng(20240611);
  Mismatches half_bad, bf16_bad;
  auto check_one = [&](float f) {
    const uint16_t h = float_to_half_bits(f);
    const uint16_t hi = independent_f32_to_f16(f);
    if (h != hi)
      half_bad.add(hex(bits_of(f), 8) + ": reference " + hex(h, 4) + ", independent " +
                   hex(hi, 4));
    const uint16_t b = float_to_bf16_bits(f);
    const uint16_t bi = independent_f32_to_bf16(f);
    if (b != bi)
      bf16_bad.add(hex(bits_of(f), 8) + ": reference " + hex(b, 4) + ", independent " +
                   hex(bi, 4));
  };
  for (int i = 0; i < 4000000; ++i) check_one(float_of(static_cast<uint32_t>(rng.next_u64())));
  for (int i = 0; i < 1000000; ++i) check_one(float_of(random_float_bits(rng)));
  for (int i = 0; i < 1000000; ++i) check_one(static_cast<float>(rng.uniform(-70000.0, 70000.0)));
  for (int i = 0; i < 1000000; ++i) {  // around the half subnormal range, 2^-27 .. 2^-13
    const int e = -27 + static_cast<int>(rng.below(15));
    const double m = rng.uniform(1.0, 2.0) * (rng.below(2) ? -1.0 : 1.0);
    check_one(static_cast<float>(std::ldexp(m, e)));
  }
  for (int i = 0; i < 1000000; ++i) {  // float subnormals and the lowest normals (bf16)
    const uint32_t u = static_cast<uint32_t>(rng.next_u64());
    check_one(float_of(u & (rng.below(2) ? 0x80ffffffu : 0x807fffffu)));
  }
  CHECK_NO_MISMATCH(half_bad);
  CHECK_NO_MISMATCH(bf16_bad);
}

// ---- every path against the scalar path ----------------------------------------------------

TEST_CASE("every path matches the scalar path bit for bit, unaligned, every length",
          "[convert]") {
  // 6'000'001 elements move > 32 MiB, so the streaming-store branch runs too.
  const std::vector<size_t> big_lengths = {255, 1000, 4099, 65537, 6000001};
  const size_t max_n = big_lengths.back() + 8;
  const std::vector<float> f32 = random_floats(max_n, 7);
  const std::vector<uint16_t> b16 = random_16(max_n, 8);

  const ConvertKernels& scalar = available_convert_kernels().front();
  REQUIRE(scalar.name == "scalar");
  std::vector<uint16_t> want_f16(max_n), want_bf16(max_n);
  std::vector<float> want_from_f16(max_n), want_from_bf16(max_n);
  scalar.f32_to_f16(f32.data(), want_f16.data(), max_n);
  scalar.f32_to_bf16(f32.data(), want_bf16.data(), max_n);
  scalar.f16_to_f32(b16.data(), want_from_f16.data(), max_n);
  scalar.bf16_to_f32(b16.data(), want_from_bf16.data(), max_n);
  // The scalar path is the header's functions, element by element.
  for (size_t i = 0; i < 1000; ++i) {
    REQUIRE(want_f16[i] == float_to_half_bits(f32[i]));
    REQUIRE(want_bf16[i] == float_to_bf16_bits(f32[i]));
    REQUIRE(bits_of(want_from_f16[i]) == bits_of(half_bits_to_float(b16[i])));
    REQUIRE(bits_of(want_from_bf16[i]) == bits_of(bf16_bits_to_float(b16[i])));
  }

  std::vector<uint16_t> out16(max_n + 64);
  std::vector<float> out32(max_n + 64);
  const float sentinel_f = float_of(0x5a5a5a5au);

  for (const auto& k : all_paths()) {
    Mismatches bad;
    auto run = [&](size_t n, size_t so, size_t d) {
      // f32 -> 16, both formats.
      for (int bf = 0; bf < 2; ++bf) {
        std::fill(out16.begin(), out16.begin() + d + n + 40, kSentinel);
        (bf ? k.f32_to_bf16 : k.f32_to_f16)(f32.data() + so, out16.data() + d, n);
        const auto& want = bf ? want_bf16 : want_f16;
        const char* dir = bf ? "f32->bf16" : "f32->f16";
        for (size_t i = 0; i < d; ++i)
          if (out16[i] != kSentinel) bad.add(std::string(dir) + " wrote before dst");
        if (std::memcmp(out16.data() + d, want.data() + so, n * 2) != 0)
          bad.add(std::string(dir) + " n=" + std::to_string(n) + " src+" + std::to_string(so) +
                  " dst+" + std::to_string(d));
        for (size_t i = d + n; i < d + n + 40; ++i)
          if (out16[i] != kSentinel)
            bad.add(std::string(dir) + " wrote past the end, n=" + std::to_string(n));
      }
      // 16 -> f32, both formats.
      for (int bf = 0; bf < 2; ++bf) {
        std::fill(out32.begin(), out32.begin() + d + n + 40, sentinel_f);
        (bf ? k.bf16_to_f32 : k.f16_to_f32)(b16.data() + so, out32.data() + d, n);
        const auto& want = bf ? want_from_bf16 : want_from_f16;
        const char* dir = bf ? "bf16->f32" : "f16->f32";
        for (size_t i = 0; i < d; ++i)
          if (bits_of(out32[i]) != 0x5a5a5a5au) bad.add(std::string(dir) + " wrote before dst");
        if (std::memcmp(out32.data() + d, want.data() + so, n * 4) != 0)
          bad.add(std::string(dir) + " n=" + std::to_string(n) + " src+" + std::to_string(so) +
                  " dst+" + std::to_string(d));
        for (size_t i = d + n; i < d + n + 40; ++i)
          if (bits_of(out32[i]) != 0x5a5a5a5au)
            bad.add(std::string(dir) + " wrote past the end, n=" + std::to_string(n));
      }
    };
    for (size_t n = 0; n <= 70; ++n)
      for (size_t so = 0; so < 4; ++so)
        for (size_t d = 0; d < 4; ++d) run(n, so, d);
    for (size_t n : big_lengths) {
      run(n, 0, 0);
      run(n, 1, 3);
      run(n, 3, 2);
      run(n, 2, 1);
    }
    INFO("path " << k.name);
    CHECK_NO_MISMATCH(bad);
  }
}

TEST_CASE("widen_add: every path adds the scalar path's widened values, every 16-bit pattern, every length",
          "[convert]") {
  // acc[i] + widen(x[i]) in FP32 on every pattern of both formats against random accumulators
  // (zeros, subnormals, infinities and NaN among them), and at every length up to 70 at unaligned
  // offsets (vector bodies and tails). The same bits as the scalar reference, whose value is the
  // widening of core/half.h plus one FP32 addition; where that is NaN, a NaN (its payload, from
  // whichever operand was NaN, is not specified).
  const size_t n = 65536 + 37;
  std::vector<uint16_t> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = uint16_t(i * 40503u);  // every pattern once in the first 65536
  const std::vector<float> acc0 = random_floats(n, 21);
  const ConvertKernels& scalar = available_convert_kernels().front();
  std::string ran;
  for (int bf = 0; bf < 2; ++bf) {
    std::vector<float> want = acc0;
    (bf ? scalar.bf16_widen_add : scalar.f16_widen_add)(x.data(), want.data(), n);
    for (size_t i = 0; i < 2000; ++i) {  // the scalar path is the header's widening plus one addition
      const float w = acc0[i] + (bf ? bf16_bits_to_float(x[i]) : half_bits_to_float(x[i]));
      REQUIRE((bits_of(want[i]) == bits_of(w) || (std::isnan(want[i]) && std::isnan(w))));
    }
    for (const auto& k : all_paths()) {
      if (bf == 0) ran += (ran.empty() ? "" : ", ") + k.name;
      const auto fn = bf ? k.bf16_widen_add : k.f16_widen_add;
      Mismatches bad;
      const auto same = [&](const float* got, const float* expect, size_t len, const std::string& where) {
        for (size_t i = 0; i < len; ++i)
          if (bits_of(got[i]) != bits_of(expect[i]) && !(std::isnan(got[i]) && std::isnan(expect[i]))) {
            bad.add(where + " element " + std::to_string(i) + ": " + hex(bits_of(got[i]), 8) + ", want " +
                    hex(bits_of(expect[i]), 8));
            return;
          }
      };
      std::vector<float> acc = acc0;
      fn(x.data(), acc.data(), n);
      same(acc.data(), want.data(), n, "whole");
      const float sentinel = float_of(0x5a5a5a5au);
      for (size_t len = 0; len <= 70; ++len)
        for (size_t off = 0; off < 4; ++off) {
          std::vector<float> a(len + 8, sentinel), e(len + 8, sentinel);
          std::copy(acc0.begin() + off, acc0.begin() + off + len, a.begin() + 1);
          std::copy(acc0.begin() + off, acc0.begin() + off + len, e.begin() + 1);
          (bf ? scalar.bf16_widen_add : scalar.f16_widen_add)(x.data() + off, e.data() + 1, len);
          fn(x.data() + off, a.data() + 1, len);
          same(a.data(), e.data(), len + 8, "length " + std::to_string(len) + " offset " + std::to_string(off));
        }
      INFO("path " << k.name << (bf ? ", bf16" : ", f16"));
      CHECK_NO_MISMATCH(bad);
    }
  }
  // F32: acc[i] + x[i], in place of the conversion.
  const std::vector<float> y = random_floats(1000, 22);
  std::vector<float> acc(acc0.begin(), acc0.begin() + 1000);
  widen_add(y.data(), DType::F32, acc.data(), acc.size());
  size_t f32_bad = 0;
  for (size_t i = 0; i < acc.size(); ++i) {
    const float w = acc0[i] + y[i];
    f32_bad += bits_of(acc[i]) != bits_of(w) && !(std::isnan(acc[i]) && std::isnan(w));
  }
  CHECK(f32_bad == 0);
  CHECK_THROWS_AS(widen_add(y.data(), DType::I32, acc.data(), 1), Error);
  WARN("widen_add checked on the paths: " << ran << " (active: " << active_convert_kernels().name << ")");
}

TEST_CASE("paths give the same bits with MXCSR DAZ and FTZ set", "[convert]") {
#if AMP_TEST_X86
  // Callers may run with flush-to-zero on (common in training loops); no path may depend on it.
  const size_t n = 4099;
  const std::vector<float> f32 = random_floats(n, 11);
  const std::vector<uint16_t> b16 = random_16(n, 12);
  const ConvertKernels& scalar = available_convert_kernels().front();
  std::vector<uint16_t> want_h(n), want_b(n);
  std::vector<float> want_fh(n), want_fb(n);
  scalar.f32_to_f16(f32.data(), want_h.data(), n);
  scalar.f32_to_bf16(f32.data(), want_b.data(), n);
  scalar.f16_to_f32(b16.data(), want_fh.data(), n);
  scalar.bf16_to_f32(b16.data(), want_fb.data(), n);

  for (const auto& k : available_convert_kernels()) {
    std::vector<uint16_t> h(n), b(n);
    std::vector<float> fh(n), fb(n);
    const unsigned saved = _mm_getcsr();
    _mm_setcsr(saved | 0x8040u);  // FTZ (bit 15) and DAZ (bit 6)
    k.f32_to_f16(f32.data(), h.data(), n);
    k.f32_to_bf16(f32.data(), b.data(), n);
    k.f16_to_f32(b16.data(), fh.data(), n);
    k.bf16_to_f32(b16.data(), fb.data(), n);
    _mm_setcsr(saved);
    INFO("path " << k.name);
    CHECK(h == want_h);
    CHECK(b == want_b);
    CHECK(std::memcmp(fh.data(), want_fh.data(), n * 4) == 0);
    CHECK(std::memcmp(fb.data(), want_fb.data(), n * 4) == 0);
  }
#else
  CHECK(available_convert_kernels().size() == 1);  // only the scalar path off x86
#endif
}

TEST_CASE("the path list matches the CPU", "[convert]") {
  const auto& ks = available_convert_kernels();
  REQUIRE(!ks.empty());
  CHECK(ks.front().name == "scalar");
  CHECK(active_convert_kernels().name == ks.back().name);
  CHECK(&active_convert_kernels() == &ks.back());
  std::vector<std::string> names;
  for (const auto& k : ks) {
    names.push_back(k.name);
    CHECK(k.f32_to_f16 != nullptr);
    CHECK(k.f16_to_f32 != nullptr);
    CHECK(k.f32_to_bf16 != nullptr);
    CHECK(k.bf16_to_f32 != nullptr);
  }
  auto has = [&](const char* n) { return std::find(names.begin(), names.end(), n) != names.end(); };
#if AMP_TEST_X86
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  CHECK(has("f16c") == (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")));
  CHECK(has("avx512") == avx512);
  CHECK(has("avx512bf16") == (avx512 && __builtin_cpu_supports("avx512bf16")));
#endif
  CHECK(std::is_sorted(names.begin() + 1, names.end(), [&](const std::string& a,
                                                           const std::string& b) {
    const char* order[] = {"f16c", "avx512", "avx512bf16"};
    auto rank = [&](const std::string& s) {
      return std::find(std::begin(order), std::end(order), s) - std::begin(order);
    };
    return rank(a) < rank(b);
  }));
}

// ---- convert() and convert_parallel() ------------------------------------------------------

TEST_CASE("convert and convert_parallel on all nine float dtype pairs", "[convert]") {
  const DType types[] = {DType::F32, DType::F16, DType::BF16};
  const std::vector<size_t> lengths = {0, 1, 37, 1023, 1024, 1025, 3001, (size_t{1} << 17) + 37};
  const size_t max_n = lengths.back();
  const std::vector<float> f32 = random_floats(max_n, 21);
  const std::vector<uint16_t> f16 = random_16(max_n, 22);
  const std::vector<uint16_t> bf16 = random_16(max_n, 23);
  auto source = [&](DType t) -> const void* {
    return t == DType::F32 ? static_cast<const void*>(f32.data())
                           : t == DType::F16 ? static_cast<const void*>(f16.data())
                                             : static_cast<const void*>(bf16.data());
  };
  // Element i of src converted with the scalar reference, as raw bits.
  auto expected_bits = [&](DType st, DType dt, size_t i) -> uint32_t {
    float v = 0;
    if (st == DType::F32) v = f32[i];
    if (st == DType::F16) {
      if (dt == DType::F16) return f16[i];
      v = half_bits_to_float(f16[i]);
    }
    if (st == DType::BF16) {
      if (dt == DType::BF16) return bf16[i];
      v = bf16_bits_to_float(bf16[i]);
    }
    if (dt == DType::F32) return bits_of(v);
    return dt == DType::F16 ? float_to_half_bits(v) : float_to_bf16_bits(v);
  };

  const int saved_threads = omp_get_max_threads();
  for (DType st : types) {
    for (DType dt : types) {
      std::vector<uint32_t> want(max_n);
      for (size_t i = 0; i < max_n; ++i) want[i] = expected_bits(st, dt, i);
      const size_t ds = dtype_size(dt);
      for (int mode = 0; mode < 4; ++mode) {  // convert, then convert_parallel on 1, 2, 3 threads
        if (mode > 0) omp_set_num_threads(mode);
        Mismatches bad;
        for (size_t n : lengths) {
          std::vector<unsigned char> out(n * ds + 64, 0xee);
          if (mode == 0)
            convert(source(st), st, out.data(), dt, n);
          else
            convert_parallel(source(st), st, out.data(), dt, n);
          for (size_t i = 0; i < n; ++i) {
            uint32_t got = 0;
            if (ds == 4) {
              std::memcpy(&got, out.data() + i * 4, 4);
            } else {
              uint16_t g16;
              std::memcpy(&g16, out.data() + i * 2, 2);
              got = g16;
            }
            if (got != want[i]) {
              bad.add("n=" + std::to_string(n) + " i=" + std::to_string(i) + ": " +
                      hex(got, 8) + ", want " + hex(want[i], 8));
              break;
            }
          }
          for (size_t i = n * ds; i < out.size(); ++i)
            if (out[i] != 0xee) bad.add("wrote past the end, n=" + std::to_string(n));
        }
        omp_set_num_threads(saved_threads);
        INFO(dtype_name(st) << " -> " << dtype_name(dt) << ", mode " << mode);
        CHECK_NO_MISMATCH(bad);
      }
    }
  }
}

TEST_CASE("convert rejects non-float dtypes", "[convert]") {
  std::vector<uint32_t> a(8, 1), b(8, 0);
  const DType bad_types[] = {DType::I32, DType::U8};
  for (DType t : bad_types) {
    INFO(dtype_name(t));
    CHECK_THROWS_AS(convert(a.data(), t, b.data(), DType::F32, 8), Error);
    CHECK_THROWS_AS(convert(a.data(), DType::F32, b.data(), t, 8), Error);
    CHECK_THROWS_AS(convert_parallel(a.data(), t, b.data(), DType::F16, 1 << 20), Error);
    CHECK_THROWS_AS(convert(a.data(), t, b.data(), t, 0), Error);  // even a same-type no-op
    try {
      convert(a.data(), DType::BF16, b.data(), t, 8);
      FAIL("no exception");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::Internal);
      CHECK(std::string(e.what()).find(dtype_name(t)) != std::string::npos);
    }
  }
  CHECK(b == std::vector<uint32_t>(8, 0));  // nothing written
}
