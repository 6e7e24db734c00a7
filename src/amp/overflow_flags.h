// The layout of the overflow-flag buffer (int32 slots in backend memory), owned by amp/. The
// buffer is reduced across ranks with one MAX all-reduce, so each slot carries who saw what:
//   kAny           1 when any rank found a non-finite value (the global flag: every rank skips);
//   kReduced       1 + the first tensor with a non-finite value after the all-reduce, or
//                  kNormOverflow when every gradient was finite but their norm was not while
//                  clipping needs it (FP32 gradients near the top of the range);
//   rank_slot(r)   1 + the first tensor with a non-finite value on rank r before the all-reduce
//                  (the pre-reduction check of each bucket writes this rank's slot);
//   norm_slot(r)   with sharded optimizer state (distributed.zero: 1): kNormSlots slots holding the
//                  bits of rank r's partial squared norm (a double cut into 21-bit pieces, each a
//                  non-negative int32, so that the MAX against the other ranks' zeros carries
//                  every rank's partial to every rank exactly); summed in rank order afterwards,
//                  in double as the unsharded pass sums its chunks, so the global norm rounds to
//                  the same FP32 value but for a last-bit tie;
//   then, with precision.compute fp8, one word per FP8 tensor from count(world) on: the bits of
//                  the tensor's amax this step (amax_bits, amp/fp8_scaling.h), so the same MAX
//                  carries every rank's amaxes and all ranks set the same FP8 scales.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/hd.h"

namespace amp {

struct OverflowFlags {
  static constexpr int kAny = 0;
  static constexpr int kReduced = 1;
  static constexpr int kRank0 = 2;
  static constexpr int32_t kNormOverflow = -1;
  AMP_HD static constexpr int rank_slot(int rank) { return kRank0 + rank; }
  static constexpr int kNormSlots = 3;
  AMP_HD static constexpr int norm_slot(int rank, int world) { return kRank0 + world + kNormSlots * rank; }
  static constexpr size_t count(int world) { return size_t(kRank0 + (1 + kNormSlots) * world); }
};

AMP_HD bool is_finite_f32(float x) { return x - x == 0.0f; }

// The step's verdict on its norm: with clipping on (max_norm > 0), a non-finite squared norm of
// gradients that were each finite skips the step too (clipping by it would zero the update), and is
// marked so. A step already flagged keeps its attribution. The norm is of the reduced sum, so the
// verdict is the same on every rank.
AMP_HD void flag_norm_overflow(int32_t* flags, float norm_sq, float max_norm) {
  if (flags[OverflowFlags::kAny] || !(max_norm > 0.0f) || is_finite_f32(norm_sq)) return;
  flags[OverflowFlags::kAny] = 1;
  flags[OverflowFlags::kReduced] = OverflowFlags::kNormOverflow;
}

// A partial squared norm into / out of its kNormSlots slots (21, 21 and 22 bits of the double).
AMP_HD void store_norm_partial(int32_t* slots, double v) {
  uint64_t b;
  memcpy(&b, &v, sizeof b);
  slots[0] = int32_t(b & 0x1FFFFFu);
  slots[1] = int32_t((b >> 21) & 0x1FFFFFu);
  slots[2] = int32_t(b >> 42);
}
AMP_HD double load_norm_partial(const int32_t* slots) {
  const uint64_t b = uint64_t(uint32_t(slots[0])) | (uint64_t(uint32_t(slots[1])) << 21) |
                     (uint64_t(uint32_t(slots[2])) << 42);
  double v;
  memcpy(&v, &b, sizeof v);
  return v;
}

// The global squared norm from the ranks' partials in their norm slots: summed in rank order in
// double, so every rank computes the same value from the same reduced flags.
AMP_HD float sum_norm_partials(const int32_t* flags, int world) {
  double s = 0.0;
  for (int r = 0; r < world; ++r) s += load_norm_partial(flags + OverflowFlags::norm_slot(r, world));
  return float(s);
}

}  // namespace amp
