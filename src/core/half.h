// Half (IEEE binary16) and BFloat16 storage types with scalar conversions.
// float -> 16-bit: round to nearest even, correct subnormals, overflow to +-inf, NaN stays NaN
// (quieted, top payload bits kept). 16-bit -> float: exact for every non-NaN value; NaN keeps its
// payload and gets the quiet bit (as x86 F16C and IEEE 754 convertFormat do).
// These scalar functions are the reference every vector or device path must match bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/hd.h"

namespace amp {

AMP_HD uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

AMP_HD float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// ---- binary16 ----------------------------------------------------------------------------

AMP_HD uint16_t float_to_half_bits(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));  // NaN
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 (or inf): inf
  if (ax >= 0x38800000u) {                                              // normal half: >= 2^-14
    // Rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even.
    const uint32_t odd = (ax >> 13) & 1u;
    return static_cast<uint16_t>(sign | ((ax - 0x38000000u + 0xfffu + odd) >> 13));
  }
  if (ax <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25: rounds to (signed) zero
  // Subnormal half: m * 2^-24 with m = mant * 2^(e - 126), a right shift of 14..24 bits.
  const uint32_t e = ax >> 23;
  const uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e;
  uint32_t m = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  if (rem > halfway || (rem == halfway && (m & 1u))) ++m;  // may carry into the smallest normal
  return static_cast<uint16_t>(sign | m);
}

AMP_HD float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) {  // inf or NaN (NaN quieted)
    return f32_from_bits(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u));
  }
  if (exp != 0) return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return f32_from_bits(sign);
  // Subnormal: normalize the mantissa.
  uint32_t e = 113u;
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return f32_from_bits(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

// ---- bfloat16 ----------------------------------------------------------------------------

AMP_HD uint16_t float_to_bf16_bits(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  // Round to nearest even on the 16 dropped bits; a carry into the exponent gives inf correctly.
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

AMP_HD float bf16_bits_to_float(uint16_t b) {
  uint32_t x = static_cast<uint32_t>(b) << 16;
  if ((x & 0x7fffffffu) > 0x7f800000u) x |= 0x400000u;  // NaN quieted
  return f32_from_bits(x);
}

// ---- storage types ----------------------------------------------------------------------

struct Half {
  uint16_t bits;
  Half() = default;
  AMP_HD explicit Half(float f) : bits(float_to_half_bits(f)) {}
  AMP_HD static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
  AMP_HD explicit operator float() const { return half_bits_to_float(bits); }
  AMP_HD float to_float() const { return half_bits_to_float(bits); }
};

struct BFloat16 {
  uint16_t bits;
  BFloat16() = default;
  AMP_HD explicit BFloat16(float f) : bits(float_to_bf16_bits(f)) {}
  AMP_HD static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
  AMP_HD explicit operator float() const { return bf16_bits_to_float(bits); }
  AMP_HD float to_float() const { return bf16_bits_to_float(bits); }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2, "16-bit storage types");

// Generic load/store for templated kernels: to_f32(x) and from_f32<T>(f).
AMP_HD float to_f32(float x) { return x; }
AMP_HD float to_f32(Half x) { return half_bits_to_float(x.bits); }
AMP_HD float to_f32(BFloat16 x) { return bf16_bits_to_float(x.bits); }

template <typename T>
AMP_HD T from_f32(float f);
template <>
AMP_HD float from_f32<float>(float f) {
  return f;
}
template <>
AMP_HD Half from_f32<Half>(float f) {
  return Half::from_bits(float_to_half_bits(f));
}
template <>
AMP_HD BFloat16 from_f32<BFloat16>(float f) {
  return BFloat16::from_bits(float_to_bf16_bits(f));
}

// Limits of binary16, used by tests and the telemetry.
constexpr float kHalfMax = 65504.0f;
constexpr float kHalfMinNormal = 6.103515625e-05f;      // 2^-14
constexpr float kHalfMinSubnormal = 5.9604644775390625e-08f;  // 2^-24

}  // namespace amp
