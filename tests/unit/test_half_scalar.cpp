// Scalar 16-bit conversions on hand-picked values (the exhaustive tests live in test_convert.cpp).
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "core/half.h"

using namespace amp;

TEST_CASE("half scalar conversion on landmarks", "[half]") {
  CHECK(float_to_half_bits(1.0f) == 0x3c00);
  CHECK(float_to_half_bits(-2.0f) == 0xc000);
  CHECK(float_to_half_bits(65504.0f) == 0x7bff);
  CHECK(float_to_half_bits(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK(half_bits_to_float(0x0001) == kHalfMinSubnormal);
  CHECK(half_bits_to_float(0x0400) == kHalfMinNormal);
  CHECK(bf16_bits_to_float(float_to_bf16_bits(1.0f)) == 1.0f);
  CHECK(std::isnan(half_bits_to_float(float_to_half_bits(std::nanf("")))));
}
