// FP8 storage formats with scalar conversions, the specification every vector or device path must
// match bit for bit (as half.h is for the 16-bit formats).
//
// E4M3 (OCP 8-bit floating point, "E4M3FN"): 1 sign, 4 exponent bits (bias 7), 3 mantissa bits; no
//   infinities; S.1111.111 is NaN; largest finite 448 (S.1111.110); smallest subnormal 2^-9.
// E5M2: 1 sign, 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like: S.11111.00 is infinity,
//   S.11111.{01,10,11} NaN; largest finite 57344 (S.11110.11); smallest subnormal 2^-16.
//
// float -> FP8 rounds to nearest, ties to even, with correct subnormals. A value beyond the largest
// finite one after rounding (|x| >= max + half a step) saturates to +-max when `saturate`, else
// becomes +-infinity (E5M2) or NaN (E4M3, which has no infinity). Infinity saturates to +-max, or
// stays infinite (E5M2) / becomes NaN (E4M3). NaN stays NaN (S.1111.111 for E4M3, S.11111.10 for
// E5M2). FP8 -> float is exact; NaN becomes the quiet NaN with the code's sign.
#pragma once

#include <cstdint>

#include "core/half.h"  // f32_bits, f32_from_bits
#include "core/hd.h"

namespace amp {

enum class Fp8 : uint8_t { E4M3, E5M2 };

constexpr float kFp8E4M3Max = 448.0f;
constexpr float kFp8E5M2Max = 57344.0f;
AMP_HD float fp8_max(Fp8 f) { return f == Fp8::E4M3 ? kFp8E4M3Max : kFp8E5M2Max; }
inline const char* fp8_name(Fp8 f) { return f == Fp8::E4M3 ? "e4m3" : "e5m2"; }

namespace fp8_detail {
// Mantissa bits, exponent bias, the largest finite code's magnitude, the NaN and infinity codes.
AMP_HD int mant_bits(Fp8 f) { return f == Fp8::E4M3 ? 3 : 2; }
AMP_HD int bias(Fp8 f) { return f == Fp8::E4M3 ? 7 : 15; }
AMP_HD uint32_t max_code(Fp8 f) { return f == Fp8::E4M3 ? 0x7eu : 0x7bu; }
AMP_HD uint32_t nan_code(Fp8 f) { return f == Fp8::E4M3 ? 0x7fu : 0x7eu; }
AMP_HD uint32_t overflow_code(Fp8 f, bool saturate) {
  return saturate ? max_code(f) : f == Fp8::E4M3 ? 0x7fu : 0x7cu;  // E4M3: NaN; E5M2: infinity
}
}  // namespace fp8_detail

AMP_HD uint8_t float_to_fp8(float x, Fp8 f, bool saturate) {
  using namespace fp8_detail;
  const uint32_t bits = f32_bits(x);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t ax = bits & 0x7fffffffu;
  if (ax > 0x7f800000u) return uint8_t(sign | nan_code(f));
  if (ax == 0x7f800000u) return uint8_t(sign | overflow_code(f, saturate));
  const uint32_t fe = ax >> 23;
  // A float subnormal (below 2^-126) is far below half the smallest FP8 subnormal: +-0.
  if (fe == 0) return uint8_t(sign);
  const int M = mant_bits(f), B = bias(f);
  const int e = int(fe) - 127;       // x = sig x 2^(e - 23), sig in [2^23, 2^24)
  const int emin = 1 - B;            // the smallest normal exponent
  const uint32_t sig = (ax & 0x7fffffu) | 0x800000u;
  // Bits of sig below the target's last place: 23 - M for a normal result, more below emin.
  const int shift = 23 - M + (e < emin ? emin - e : 0);
  if (shift > 25) return uint8_t(sign);  // below half the smallest subnormal
  uint32_t r = sig >> shift;
  const uint32_t rem = sig & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (r & 1u))) ++r;  // to nearest, ties to even
  uint32_t exp_field, mant;
  if (e < emin) {  // subnormal: r in [0, 2^M]; 2^M is the smallest normal
    exp_field = r >> M;
    mant = r & ((1u << M) - 1u);
  } else {  // normal: r in [2^M, 2^(M+1)]; 2^(M+1) carries into the exponent
    int E = e + B;
    if (r >> (M + 1)) {
      r >>= 1;
      ++E;
    }
    if (E > (f == Fp8::E4M3 ? 15 : 30)) return uint8_t(sign | overflow_code(f, saturate));
    exp_field = uint32_t(E);
    mant = r & ((1u << M) - 1u);
  }
  const uint32_t code = (exp_field << M) | mant;
  if (code > max_code(f)) return uint8_t(sign | overflow_code(f, saturate));  // E4M3's S.1111.111
  return uint8_t(sign | code);
}

AMP_HD float fp8_to_float(uint8_t v, Fp8 f) {
  using namespace fp8_detail;
  const uint32_t sign = uint32_t(v & 0x80u) << 24;
  const uint32_t c = v & 0x7fu;
  const int M = mant_bits(f), B = bias(f);
  const uint32_t E = c >> M, mant = c & ((1u << M) - 1u);
  if (f == Fp8::E4M3 ? c == 0x7fu : E == 31u) {
    if (f == Fp8::E5M2 && mant == 0) return f32_from_bits(sign | 0x7f800000u);
    return f32_from_bits(sign | 0x7fc00000u);
  }
  if (E == 0) {  // mant x 2^(1 - B - M): a normal float, built exactly
    if (mant == 0) return f32_from_bits(sign);
    return f32_from_bits(sign | f32_bits(float(mant) * f32_from_bits(uint32_t(127 + 1 - B - M) << 23)));
  }
  return f32_from_bits(sign | (uint32_t(int(E) - B + 127) << 23) | (mant << (23 - M)));
}

}  // namespace amp
