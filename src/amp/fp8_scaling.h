// Delayed per-tensor scaling for FP8 (the rule of NVIDIA Transformer Engine's DelayedScaling recipe,
// with the scale rounded down to a power of two, see pow2_floor):
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
#include <functional>
#include <string>

#include "core/dtype.h"

#include "core/fp8.h"
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
// Whether an amax word says the tensor held an infinity or a NaN (its bits are +inf's or above).
AMP_HD bool amax_nonfinite(int32_t b) { return uint32_t(b) >= 0x7f800000u; }

// The scale the casts use: rounded down to a power of two within [2^-126, 2^126] (an infinite
// scale, from a subnormal amax, becomes 2^126). x * scale and q / scale are then exact, so an FP8
// value divided by its scale is exact in BF16 and a GEMM on those dequantized values equals the FP8
// GEMM's (the products of the codes, times both descales) up to summation order: the CPU emulation
// computes what an FP8 GEMM with scale pointers computes. Rounding down keeps amax x scale within
// fp8_max x 2^-margin (at most one power of two of headroom more).
AMP_HD float pow2_floor(float s) {
  const uint32_t e = (f32_bits(s) >> 23) & 0xffu;  // s > 0
  const uint32_t clamped = e < 1u ? 1u : e > 253u ? 253u : e;
  return f32_from_bits(clamped << 23);
}

// precision.fp8.*: the recipe.
struct Fp8Params {
  int32_t history = 16;  // amax_history: steps of amaxes kept per tensor
  AmaxAlgo algo = AmaxAlgo::Max;
  int32_t margin = 0;    // powers of two of headroom below the format's maximum
  bool delayed = true;   // false: every scale stays 1 (no scaling; the amaxes are still recorded)
  bool native_gemm = true;  // precision.fp8.gemm auto: FP8 GEMMs where the ops have them (else emulated)
};

// The FP8 state in backend memory, one buffer: per tensor its scale, its inverse, its format's
// maximum and its amax history ring, then where the ring's newest entry is.
struct Fp8Meta {
  int32_t newest = -1;    // ring index of the newest amax (-1: none recorded yet)
  int32_t recorded = 0;   // steps recorded (the history is full from `history` on)
};

// After a step's one all-reduce: the reduced amaxes (amax_bits words, one per tensor) join the
// history at the next ring position and every scale is set from its history. A skipped step
// records nothing: its backward overflowed, and its amaxes describe values the update never used.
// The same on every rank (same words, same state). history: n x p.history floats, tensor-major.
// inv_scales (optional): 1 / scale for each tensor, kept beside (what FP8 GEMMs multiply by).
// skipped_amax (optional, n words): a skipped step's amax words are copied there, so that the skip
// report can name the FP8 operands that were not finite (amax_nonfinite) however late it reads them.
AMP_HD void fp8_update(float* scales, const float* fmax, float* history, Fp8Meta* meta, const int32_t* amax_words,
                       int n, const Fp8Params& p, bool skipped, float* inv_scales = nullptr,
                       int32_t* skipped_amax = nullptr) {
  if (skipped) {
    if (skipped_amax)
      for (int t = 0; t < n; ++t) skipped_amax[t] = amax_words[t];
    return;
  }
  const int pos = (meta->newest + 1) % p.history;
  for (int t = 0; t < n; ++t) {
    float* ring = history + size_t(t) * size_t(p.history);
    ring[pos] = amax_from_bits(amax_words[t]);
    if (p.delayed)
      scales[t] = pow2_floor(delayed_scale(history_amax(ring, p.history, pos, p.algo), fmax[t], p.margin, scales[t]));
    if (inv_scales) inv_scales[t] = 1.0f / scales[t];  // exact: a power of two
  }
  meta->newest = pos;
  ++meta->recorded;
}

// What an FP8 operand carries, in the compute dtype's range: fp8(x x scale) / scale for finite x
// (the cast saturating, round to nearest even), x itself when it is not finite (infinities and
// NaN pass through, so a non-finite gradient still reaches the overflow check and skips the step).
// inv_scale = 1 / scale (exact: a power of two).
AMP_HD float fp8_quantized(float x, float scale, float inv_scale, Fp8 f) {
  if (!(x - x == 0.0f)) return x;
  return fp8_to_float(float_to_fp8(x * scale, f, true), f) * inv_scale;
}

// One FP8 tensor of a model.
struct Fp8Tensor {
  std::string name;  // "h.0.attn.qkv.input"
  Fp8 format = Fp8::E4M3;
};

// Where a model's FP8 casts read and write (backend memory), by the index of the tensor in the
// model's fp8_tensors(). The casts record into amax and counts only inside a training step (a
// training forward, and backward), never in evaluation or sampling.
struct Fp8Binding {
  const float* scales = nullptr;      // n: the scales of this step
  const float* inv_scales = nullptr;  // n: 1 / scale each (FP8 GEMMs' descales)
  int32_t* amax = nullptr;            // n words of the flag buffer (cleared by begin_step)
  int64_t* counts = nullptr;          // 3 per tensor: elements cast, flushed to zero, saturated
  bool native_gemm = false;           // FP8 codes and ComputeOps::fp8_gemm (else the emulation)
  // Called with (tensor, its data, its dtype) before a training step casts an output gradient: the
  // fault drill that plants a non-finite value into one (faults.inject_nonfinite NAME.grad_output).
  std::function<void(int tensor, void* data, DType dtype)> before_grad_cast;
};

// What a tensor's casts did since the process started (reports).
struct Fp8Counts {
  int64_t elements = 0, flushed = 0, saturated = 0;
};

}  // namespace amp
