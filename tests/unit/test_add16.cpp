// The 16-bit combining sums of the all-reduce (f16_add, bf16_add) and of the add op (f16_sum,
// bf16_sum: out = a + b) against the scalar reference:
// random bit patterns including NaN, inf and subnormals, every length up to 70 and a large one.
#include <catch2/catch.hpp>

#include <vector>

#include "core/convert.h"
#include "core/half.h"
#include "core/rng.h"

using namespace amp;

TEST_CASE("16-bit sums are float additions rounded once, bit for bit", "[convert][add16]") {
  Rng rng(77);
  for (bool bf16 : {false, true}) {
    for (size_t n : {size_t(0), size_t(1), size_t(15), size_t(16), size_t(17), size_t(33), size_t(70), size_t(100003)}) {
      std::vector<uint16_t> a(n), b(n);
      for (size_t i = 0; i < n; ++i) {
        a[i] = uint16_t(rng.next_u64());
        // Half the pairs share a magnitude range so that sums round, cancel and overflow often.
        b[i] = (i % 2) ? uint16_t(rng.next_u64()) : uint16_t((a[i] & 0xfc00u) | (rng.next_u64() & 0x83ffu));
      }
      std::vector<uint16_t> expect(n), got = b;
      for (size_t i = 0; i < n; ++i) {
        const float s = bf16 ? bf16_bits_to_float(a[i]) + bf16_bits_to_float(b[i])
                             : half_bits_to_float(a[i]) + half_bits_to_float(b[i]);
        expect[i] = bf16 ? float_to_bf16_bits(s) : float_to_half_bits(s);
      }
      (bf16 ? bf16_add : f16_add)(a.data(), got.data(), n);
      // the three-operand form (the add op's): a and b kept, the sum in a third array
      std::vector<uint16_t> out(n + 1, 0x1234);
      const std::vector<uint16_t> a0 = a, b0 = b;
      (bf16 ? bf16_sum : f16_sum)(a.data(), b.data(), out.data(), n);
      size_t wrong = 0, wrong_out = 0;
      for (size_t i = 0; i < n; ++i) {
        const bool nan_e = bf16 ? (expect[i] & 0x7fff) > 0x7f80 : (expect[i] & 0x7fff) > 0x7c00;
        const auto wrong_bits = [&](uint16_t g) {
          const bool nan_g = bf16 ? (g & 0x7fff) > 0x7f80 : (g & 0x7fff) > 0x7c00;
          return nan_e ? !nan_g : g != expect[i];  // NaN payloads may differ; NaN-ness may not
        };
        wrong += wrong_bits(got[i]);
        wrong_out += wrong_bits(out[i]);
      }
      INFO((bf16 ? "bf16" : "f16") << " n=" << n);
      CHECK(wrong == 0);
      CHECK(wrong_out == 0);
      CHECK(out[n] == 0x1234);  // nothing past n
      CHECK((a == a0 && b == b0));
    }
  }
  // Overflow to inf and exact small sums.
  uint16_t a = float_to_half_bits(40000.0f), b = float_to_half_bits(40000.0f);
  f16_add(&a, &b, 1);
  CHECK(b == 0x7c00);
  a = float_to_bf16_bits(1.5f), b = float_to_bf16_bits(2.25f);
  bf16_add(&a, &b, 1);
  CHECK(bf16_bits_to_float(b) == 3.75f);
}
