// Delayed per-tensor scaling for FP8 (the rule of NVIDIA Transformer Engine's DelayedScaling recipe):
// each FP8 tensor is cast as fp8(x * scale), with the scale set after every step from a history of
// the tensor's absolute maxima (amax) over the last `len` steps, so that the step itself never waits
// for a reduction of the tensor it casts:
//   amax  = the history's maximum (AmaxAlgo::Max) or the newest entry (AmaxAlgo::MostRecent),
//           non-finite entries ignored by the maximum, as fmaxf ignores NaN;
//   scale = (fp8_max x 2^-margin) / amax   when amax is finite and positive,
//           the previous scale              otherwise (no information: keep what worked).
// The amaxes travel with the overflow flags in the step's one MAX all-reduce (amax_bits): the bit
// pattern of a non-negative float orders as its value when read as an int32 (+inf above every
// finite value, NaN above +inf), so the MAX of the bits is the bits of the MAX, and every rank
// ends the step with the same history and the same scales.
#pragma once

#include <cstdint>

#include "core/half.h"  // f32_bits, f32_from_bits
#include "core/hd.h"

namespace amp {

enum class AmaxAlgo : uint8_t { Max, MostRecent };

// The amax that sets the next scale: ring[0, len) holds the last len steps' amaxes, the newest at
// index `newest`.
AMP_HD float history_amax(const float* ring, int len, int newest, AmaxAlgo algo) {
  if (algo == AmaxAlgo::MostRecent) return ring[newest];
  float m = 0.0f;
  for (int i = 0; i < len; ++i)
    if (ring[i] > m) m = ring[i];  // NaN compares false: ignored
  return m;
}

// The next scale from the amax (margin: whole powers of two of headroom, 0 .. 126).
AMP_HD float delayed_scale(float amax, float fp8_max, int margin, float prev_scale) {
  const float scaled_max = fp8_max * f32_from_bits(uint32_t(127 - margin) << 23);  // exact: x 2^-margin
  const bool finite = (f32_bits(amax) & 0x7f800000u) != 0x7f800000u;
  return finite && amax > 0.0f ? scaled_max / amax : prev_scale;
}

// An amax (>= 0, or NaN) as a flag word for the MAX all-reduce, and back. -0 becomes +0.
AMP_HD int32_t amax_bits(float amax) { return int32_t(f32_bits(amax) & 0x7fffffffu); }
AMP_HD float amax_from_bits(int32_t b) { return f32_from_bits(uint32_t(b)); }

}  // namespace amp
