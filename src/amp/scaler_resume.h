// The loss scaler's side of a resume: a checkpoint's ScalerState is validated against the step it
// was written at (every field in the range the program can produce, so no later arithmetic can
// overflow on a crafted file) and then adapted to this run's ScalerParams:
//   - another mode, or another static scale: the new mode starts from its initial state (scale,
//     growth tracker, hysteresis), the counters (skipped and applied steps, iterations, the last
//     overflow's attribution) carry on;
//   - dynamic with changed knobs: the scale is clamped into [min_scale, max_scale], the growth
//     tracker to at most growth_interval - 1 (a tracker carried past a shorter interval grows at the
//     next clean step instead of never); a changed hysteresis moves the hysteresis left by the
//     difference (the overflows already absorbed since the last growth stay used: 1 -> 5 with none
//     absorbed tolerates 5, as a fresh run would) and clamps it to at most hysteresis; a state
//     written with the same settings is unchanged (bit-exact resume).
// The first is the state machine's policy (loss_scaler.h), so it lives beside it, not in the
// checkpoint reader.
#pragma once

#include <cstdint>
#include <string>

#include "amp/loss_scaler.h"

namespace amp {

struct ScalerResume {
  ScalerState state;
  std::string note;  // what changed and why ("" when nothing did), for the start-up log
};

// saved: the checkpoint's state at `step`; mode_then: the checkpoint's loss_scale_mode ("" when it
// does not say); tensors: the model's parameter tensors (bounds the overflow attribution); world_then:
// the ranks that wrote it; hysteresis_then: the checkpoint's precision.loss_scale.hysteresis (-1 when
// it does not say). Returns "" in *error and the adapted state, or the first field out of range in
// *error.
ScalerResume scaler_resume(const ScalerState& saved, const std::string& mode_then, const ScalerParams& now, int64_t step,
                           int64_t tensors, int64_t world_then, std::string* error, int64_t hysteresis_then = -1);

}  // namespace amp
