// The loss-scale state machine, shared by host code and the device (one-thread kernel), so every
// rank and every backend runs the same arithmetic on the same inputs.
//
// Dynamic mode follows PyTorch's GradScaler (torch._amp_update_scale_) by default: on overflow the
// scale is multiplied by backoff_factor and the growth tracker reset; after growth_interval clean
// steps in a row it is multiplied by growth_factor, unless the result is not finite. Beyond
// PyTorch: hysteresis (back off only after that many overflows since the last growth, as Megatron),
// min/max clamps, and a count of consecutive overflowing steps at the minimum scale, which the
// trainer turns into a divergence error. Static and none keep the scale fixed but still count.
#pragma once

#include <cstdint>

#include "amp/overflow_flags.h"
#include "core/hd.h"

namespace amp {

enum class ScaleMode : int32_t { None = 0, Static = 1, Dynamic = 2 };

struct ScalerParams {
  ScaleMode mode = ScaleMode::Dynamic;
  float init_scale = 65536.0f;
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int32_t growth_interval = 2000;
  int32_t hysteresis = 1;
  float min_scale = 1.0f;
  float max_scale = 3.4028234663852886e38f;
};

// Plain data: lives in device memory on GPUs, copied into checkpoints as is.
struct ScalerState {
  float scale = 1.0f;
  int32_t growth_tracker = 0;      // consecutive clean steps since the last change
  int32_t hysteresis_left = 1;     // overflows still tolerated before backing off
  int32_t overflow_at_min = 0;     // consecutive overflowing steps with the scale at its minimum
  int64_t overflow_steps = 0;      // total skipped steps
  int64_t optimizer_steps = 0;     // total applied steps (AdamW's bias correction counts these)
  // What the host needs to report skips without reading every step (device backends read this
  // block only when they log): the last overflowing iteration and where its non-finite values were.
  int64_t iterations = 0;          // steps seen, skipped or not
  int64_t last_overflow_iteration = 0;  // 1-based iteration of the last skip (0: none)
  int32_t last_overflow_tensor = 0;     // 1 + tensor with a non-finite value after the all-reduce
  int32_t last_overflow_rank = -1;      // first rank that had one before the all-reduce (-1: none)
  int32_t last_overflow_rank_tensor = 0;  // 1 + that rank's first such tensor
  int32_t pad_ = 0;
};

AMP_HD ScalerState scaler_init(const ScalerParams& p) {
  ScalerState s;
  s.scale = p.mode == ScaleMode::None ? 1.0f : p.init_scale;
  s.hysteresis_left = p.hysteresis;
  return s;
}

AMP_HD void scaler_update(ScalerState& s, const ScalerParams& p, bool found_inf) {
  s.iterations += 1;
  if (found_inf) {
    s.last_overflow_iteration = s.iterations;
    s.overflow_steps += 1;
    const bool at_min = p.mode != ScaleMode::Dynamic || s.scale <= p.min_scale;
    s.overflow_at_min = at_min ? s.overflow_at_min + 1 : 0;
    if (p.mode != ScaleMode::Dynamic) return;
    s.growth_tracker = 0;
    s.hysteresis_left -= 1;
    if (s.hysteresis_left <= 0) {
      const float backed_off = s.scale * p.backoff_factor;
      s.scale = backed_off < p.min_scale ? p.min_scale : backed_off;
    }
    return;
  }
  s.optimizer_steps += 1;
  s.overflow_at_min = 0;
  if (p.mode != ScaleMode::Dynamic) return;
  const int32_t successful = s.growth_tracker + 1;
  if (successful >= p.growth_interval) {  // >=: a tracker is never past the interval (scaler_resume clamps it)
    const float grown = s.scale * p.growth_factor;
    if (is_finite_f32(grown)) s.scale = grown > p.max_scale ? p.max_scale : grown;
    s.growth_tracker = 0;
    s.hysteresis_left = p.hysteresis;
  } else {
    s.growth_tracker = successful;
  }
}

}  // namespace amp

namespace amp {

// Copies the attribution of an overflowing step out of the reduced flag slots (OverflowFlags).
AMP_HD void scaler_record_flags(ScalerState& s, const int32_t* flags, int world) {
  if (flags[OverflowFlags::kAny] == 0) return;
  s.last_overflow_tensor = flags[OverflowFlags::kReduced];
  s.last_overflow_rank = -1;
  s.last_overflow_rank_tensor = 0;
  for (int r = 0; r < world; ++r) {
    if (flags[OverflowFlags::rank_slot(r)] != 0) {
      s.last_overflow_rank = r;
      s.last_overflow_rank_tensor = flags[OverflowFlags::rank_slot(r)];
      break;
    }
  }
}

}  // namespace amp
