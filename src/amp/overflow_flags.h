// The layout of the overflow-flag buffer (int32 slots in backend memory), owned by amp/. The
// buffer is reduced across ranks with one MAX all-reduce, so each slot carries who saw what:
//   kAny           1 when any rank found a non-finite value (the global flag: every rank skips);
//   kReduced       1 + the first tensor with a non-finite value after the all-reduce, or
//                  kNormOverflow when every gradient was finite but their norm was not while
//                  clipping needs it (FP32 gradients near the top of the range);
//   rank_slot(r)   1 + the first tensor with a non-finite value on rank r before the all-reduce
//                  (the pre-reduction check of each bucket writes this rank's slot);
//   norm_slot(r)   with sharded optimizer state (distributed.zero: 1): the bits of rank r's partial
//                  squared norm (FP32, >= 0, so its int32 bits order as the value does and the MAX
//                  carries every rank's partial to every rank); summed in rank order afterwards.
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
  AMP_HD static constexpr int norm_slot(int rank, int world) { return kRank0 + world + rank; }
  static constexpr size_t count(int world) { return size_t(kRank0 + 2 * world); }
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

// The global squared norm from the ranks' partials in their norm slots: summed in rank order in
// double, so every rank computes the same value from the same reduced flags.
AMP_HD float sum_norm_partials(const int32_t* flags, int world) {
  double s = 0.0;
  for (int r = 0; r < world; ++r) {
    float part;
    memcpy(&part, flags + OverflowFlags::norm_slot(r, world), sizeof part);
    s += double(part);
  }
  return float(s);
}

}  // namespace amp
