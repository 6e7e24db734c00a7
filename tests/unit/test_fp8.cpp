// FP8 casts (core/fp8.h) against an independent reference: every one of the 256 codes decoded from
// its fields in double, and random floats (ties, subnormals, saturation, NaN and infinity) encoded
// by a brute-force search for the nearest code; the delayed-scaling rule (amp/fp8_scaling.h)
// against a transcription of Transformer Engine's rolled-history update; the amax words of the MAX
// all-reduce.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "amp/fp8_scaling.h"
#include "core/fp8.h"
#include "core/rng.h"

using namespace amp;

namespace {

struct Spec {
  Fp8 f;
  const char* name;
  int ebits, mbits, bias;
};
const Spec kSpecs[] = {{Fp8::E4M3, "e4m3", 4, 3, 7}, {Fp8::E5M2, "e5m2", 5, 2, 15}};

// The value of a code from its fields (OCP FP8: E4M3 has NaN at S.1111.111 and no infinity; E5M2
// is IEEE-like), in double. NaN as NaN.
double reference_decode(const Spec& s, unsigned code) {
  const int sign = code >> 7, e = (code >> s.mbits) & ((1 << s.ebits) - 1), m = code & ((1 << s.mbits) - 1);
  const int emax_field = (1 << s.ebits) - 1;
  double v;
  if (s.f == Fp8::E4M3 && e == emax_field && m == (1 << s.mbits) - 1) return std::nan("");
  if (s.f == Fp8::E5M2 && e == emax_field) {
    if (m != 0) return std::nan("");
    v = std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    v = std::ldexp(double(m), 1 - s.bias - s.mbits);
  } else {
    v = std::ldexp(double((1 << s.mbits) + m), e - s.bias - s.mbits);
  }
  return sign ? -v : v;
}

// float -> FP8 by search: the nearest of the non-negative finite codes and of one more step above
// the largest (the value overflow rounds to), ties to the even code; then the sign. The step above
// the largest: 480 for E4M3 (its code S.1111.111 would be odd), 65536 for E5M2 (S.11111.00, even).
unsigned reference_encode(const Spec& s, float x, bool saturate) {
  const unsigned sign = std::signbit(x) ? 0x80u : 0u;
  const unsigned max_code = s.f == Fp8::E4M3 ? 0x7eu : 0x7bu;
  const unsigned overflow = saturate ? max_code : (s.f == Fp8::E4M3 ? 0x7fu : 0x7cu);
  if (std::isnan(x)) return sign | (s.f == Fp8::E4M3 ? 0x7fu : 0x7eu);
  if (std::isinf(x)) return sign | overflow;
  const double a = std::fabs(double(x));
  // At or beyond the step above the largest, that step is the nearest (and far out the distances
  // would round alike in double: decide before measuring them).
  if (a >= (s.f == Fp8::E4M3 ? 480.0 : 65536.0)) return sign | overflow;
  unsigned best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (unsigned c = 0; c <= max_code + 1; ++c) {
    const double v = c <= max_code ? reference_decode(s, c) : s.f == Fp8::E4M3 ? 480.0 : 65536.0;
    const double d = std::fabs(v - a);
    if (d < best_d || (d == best_d && (c & 1u) == 0)) best = c, best_d = d;
  }
  return sign | (best > max_code ? overflow : best);
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

TEST_CASE("fp8: every code decodes to its value from the fields", "[fp8]") {
  for (const Spec& s : kSpecs) {
    INFO(s.name);
    size_t wrong = 0, nans = 0;
    for (unsigned c = 0; c < 256; ++c) {
      const double want = reference_decode(s, c);
      const float got = fp8_to_float(uint8_t(c), s.f);
      if (std::isnan(want)) {
        nans += std::isnan(got) && std::signbit(got) == bool(c & 0x80u);
        continue;
      }
      wrong += double(got) != want || std::signbit(got) != std::signbit(want);
    }
    CHECK(wrong == 0);
    CHECK(nans == (s.f == Fp8::E4M3 ? 2u : 6u));
    CHECK(fp8_to_float(s.f == Fp8::E4M3 ? 0x7e : 0x7b, s.f) == fp8_max(s.f));
    CHECK(fp8_to_float(1, s.f) == float(std::ldexp(1.0, s.f == Fp8::E4M3 ? -9 : -16)));  // smallest subnormal
  }
}

TEST_CASE("fp8: every value round-trips, and random floats, ties and the overflow edge round as the search does",
          "[fp8]") {
  for (const Spec& s : kSpecs) {
    INFO(s.name);
    for (bool saturate : {false, true}) {
      INFO("saturate " << saturate);
      // Every code that is a number decodes and encodes back to itself (E5M2's infinities too,
      // without saturation).
      size_t trips = 0;
      for (unsigned c = 0; c < 256; ++c) {
        const float v = fp8_to_float(uint8_t(c), s.f);
        if (std::isnan(v) || (std::isinf(v) && saturate)) continue;
        trips += float_to_fp8(v, s.f, saturate) == c;
        CHECK(float_to_fp8(v, s.f, saturate) == c);
      }
      CHECK(trips == (s.f == Fp8::E4M3 ? 254u : saturate ? 248u : 250u));  // NaN codes: 2 and 6
      // Candidates: random magnitudes over the whole range and beyond, the midpoints between
      // neighbouring codes (ties) and the floats just beside them, the overflow edge.
      std::vector<float> xs;
      Rng rng(42);
      for (int i = 0; i < 200000; ++i) {
        const int e = int(rng.below(56)) - 30;  // 2^-30 .. 2^25
        float x = std::ldexp(1.0f + float(rng.uniform()), e);
        if (rng.below(2)) x = -x;
        xs.push_back(x);
      }
      for (unsigned c = 0; c < (s.f == Fp8::E4M3 ? 0x7eu : 0x7bu); ++c) {
        const float mid = float((reference_decode(s, c) + reference_decode(s, c + 1)) / 2);  // exact in float
        for (float m : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) xs.push_back(m), xs.push_back(-m);
      }
      const float edge = s.f == Fp8::E4M3 ? 464.0f : 61440.0f;  // the largest value + half a step
      for (float x : {edge, std::nextafter(edge, 0.0f), std::nextafter(edge, 1e30f), 1e30f, 3.4e38f, 1e-45f, 0.0f,
                      -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::denorm_min()})
        xs.push_back(x);
      size_t wrong = 0;
      for (float x : xs) {
        const unsigned want = reference_encode(s, x, saturate), got = float_to_fp8(x, s.f, saturate);
        if (want != got) {
          if (++wrong <= 5) WARN(s.name << " x = " << x << " (0x" << std::hex << bits(x) << "): want 0x" << want << " got 0x" << got);
        }
      }
      CHECK(wrong == 0);
      CHECK(xs.size() > 200000);
    }
    // The edges spelled out: ties to even at the top, saturation or overflow beyond.
    if (s.f == Fp8::E4M3) {
      CHECK(float_to_fp8(464.0f, s.f, false) == 0x7e);  // the tie goes to 448 (mantissa 110, even)
      CHECK(float_to_fp8(465.0f, s.f, false) == 0x7f);  // NaN: E4M3 has no infinity
      CHECK(float_to_fp8(-465.0f, s.f, true) == 0xfe);  // -448
    } else {
      CHECK(float_to_fp8(61440.0f, s.f, false) == 0x7c);  // the tie goes up (mantissa 11 is odd): infinity
      CHECK(float_to_fp8(61439.0f, s.f, false) == 0x7b);
      CHECK(float_to_fp8(-1e9f, s.f, true) == 0xfb);
    }
  }
}

namespace {

// Transformer Engine's amax-and-scale update, transcribed from its description: the history is an
// array whose entry 0 holds the current step's amax; the update rolls it by one (entry i takes entry
// i + 1, the last takes the old entry 0, entry 0 is cleared for the next step), takes the amax as
// the maximum of the rolled entries (fmaxf) or the old entry 0 (most recent), and sets
// scale = (fp8_max * 2^-margin) / amax when amax is finite and > 0, else keeps the scale.
struct TeHistory {
  std::vector<float> h;
  float scale = 1.0f;
  explicit TeHistory(int len) : h(size_t(len), 0.0f) {}
  void record(float amax) { h[0] = std::fmax(h[0], amax); }
  void update(bool most_recent, float fp8_max, int margin) {
    const size_t n = h.size();
    const float last = h[0];
    std::vector<float> rolled(n);
    float amax = 0.0f;
    for (size_t i = 0; i < n; ++i) {
      const float a = i < n - 1 ? h[i + 1] : last;
      amax = std::fmax(amax, a);
      rolled[i] = i > 0 ? a : 0.0f;
    }
    if (most_recent) amax = last;
    const float scaled_max = fp8_max * std::pow(2.0f, float(-margin));
    if (std::isfinite(amax) && amax > 0) scale = scaled_max / amax;
    h = rolled;
  }
};

}  // namespace

TEST_CASE("fp8: the delayed-scaling rule gives Transformer Engine's scales, bit for bit", "[fp8][scaling]") {
  for (int len : {1, 4, 16}) {
    for (bool most_recent : {false, true}) {
      for (int margin : {0, 1, 3}) {
        INFO("history " << len << (most_recent ? " most recent" : " max") << " margin " << margin);
        TeHistory te(len);
        std::vector<float> ring(size_t(len), 0.0f);
        float scale = 1.0f;
        Rng rng(uint64_t(len * 100 + margin * 10 + most_recent));
        size_t wrong = 0, changed = 0;
        for (int step = 0; step < 300; ++step) {
          // This step's amax: usually a positive value over many decades, sometimes 0, inf or NaN.
          const uint64_t k = rng.below(20);
          float amax = std::ldexp(float(rng.uniform()) + 0.5f, int(rng.below(40)) - 20);
          if (k == 0) amax = 0.0f;
          if (k == 1) amax = std::numeric_limits<float>::infinity();
          if (k == 2) amax = std::numeric_limits<float>::quiet_NaN();
          te.record(amax);
          te.update(most_recent, kFp8E4M3Max, margin);
          const int newest = step % len;
          ring[size_t(newest)] = amax;
          const float before = scale;
          scale = delayed_scale(history_amax(ring.data(), len, newest, most_recent ? AmaxAlgo::MostRecent : AmaxAlgo::Max),
                                kFp8E4M3Max, margin, scale);
          wrong += bits(scale) != bits(te.scale);
          changed += scale != before;
        }
        CHECK(wrong == 0);
        CHECK(changed >= 15);  // the rule moved the scale: the comparison was not of constants
      }
    }
  }
}

TEST_CASE("fp8: amaxes ride the MAX all-reduce as int32 words", "[fp8][scaling]") {
  Rng rng(5);
  std::vector<float> v;
  for (int i = 0; i < 5000; ++i) v.push_back(std::ldexp(float(rng.uniform()), int(rng.below(260)) - 130));
  v.push_back(0.0f);
  v.push_back(-0.0f);
  v.push_back(std::numeric_limits<float>::infinity());
  v.push_back(std::numeric_limits<float>::denorm_min());
  size_t wrong = 0;
  for (size_t i = 0; i + 1 < v.size(); ++i) {
    const float a = std::fabs(v[i]), b = std::fabs(v[i + 1]);
    const int32_t m = std::max(amax_bits(v[i]), amax_bits(v[i + 1]));
    wrong += amax_from_bits(m) != std::max(a, b);
  }
  CHECK(wrong == 0);
  CHECK(amax_bits(-0.0f) == 0);
  // A NaN amax (a non-finite tensor) wins the maximum, as the overflow flag does.
  CHECK(std::isnan(amax_from_bits(std::max(amax_bits(std::numeric_limits<float>::quiet_NaN()),
                                           amax_bits(std::numeric_limits<float>::infinity())))));
}
