#include "amp/scaler_resume.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "core/error.h"

namespace amp {

namespace {

const char* mode_name(ScaleMode m) {
  switch (m) {
    case ScaleMode::None: return "none";
    case ScaleMode::Static: return "static";
    case ScaleMode::Dynamic: return "dynamic";
  }
  return "?";
}

}  // namespace

ScalerResume scaler_resume(const ScalerState& saved, const std::string& mode_then, const ScalerParams& now, int64_t step,
                           int64_t tensors, int64_t world_then, std::string* error, int64_t hysteresis_then) {
  const ScalerState& s = saved;
  error->clear();
  auto out_of_range = [&](const char* field, long double v, const std::string& range) {
    *error = strcat("loss-scaler field ", field, " is ", double(v), ", outside ", range, " at step ", step);
  };
  // What scaler_update() can have produced after `step` steps.
  if (!(std::isfinite(s.scale) && s.scale > 0)) out_of_range("scale", s.scale, "a positive finite number");
  else if (s.iterations != step) out_of_range("iterations", double(s.iterations), strcat("the step (", step, ")"));
  else if (s.overflow_steps < 0 || s.optimizer_steps < 0 || s.overflow_steps + s.optimizer_steps != step)
    *error = strcat("the loss-scaler state (", s.overflow_steps, " skipped + ", s.optimizer_steps, " applied of ",
                    s.iterations, " steps) does not fit step ", step);
  else if (s.growth_tracker < 0 || s.growth_tracker > step) out_of_range("growth_tracker", s.growth_tracker, strcat("[0, ", step, "]"));
  else if (s.hysteresis_left < -step)  // decremented once per overflow at most
    out_of_range("hysteresis_left", s.hysteresis_left, strcat("[-", step, ", 2^31)"));
  else if (s.overflow_at_min < 0 || s.overflow_at_min > s.overflow_steps)
    out_of_range("overflow_at_min", s.overflow_at_min, strcat("[0, ", s.overflow_steps, "] (the skipped steps)"));
  else if (s.last_overflow_iteration < 0 || s.last_overflow_iteration > step ||
           (s.overflow_steps > 0) != (s.last_overflow_iteration > 0))
    out_of_range("last_overflow_iteration", double(s.last_overflow_iteration), strcat("[1, ", step, "] when steps were skipped, else 0"));
  else if ((s.last_overflow_tensor < 0 && s.last_overflow_tensor != OverflowFlags::kNormOverflow) ||
           s.last_overflow_tensor > tensors)
    out_of_range("last_overflow_tensor", s.last_overflow_tensor, strcat("[0, ", tensors, "] (1 + a tensor) or -1 (the norm)"));
  else if (s.last_overflow_rank < -1 || s.last_overflow_rank >= world_then)
    out_of_range("last_overflow_rank", s.last_overflow_rank, strcat("[-1, ", world_then, ")"));
  else if (s.last_overflow_rank_tensor < 0 || s.last_overflow_rank_tensor > tensors)
    out_of_range("last_overflow_rank_tensor", s.last_overflow_rank_tensor, strcat("[0, ", tensors, "]"));
  if (!error->empty()) return {};

  ScalerResume r{saved, ""};
  ScalerState& t = r.state;
  const std::string mode_now = mode_name(now.mode);
  const bool static_changed = now.mode == ScaleMode::Static && s.scale != now.init_scale;
  if ((!mode_then.empty() && mode_then != mode_now) || static_changed) {
    const ScalerState fresh = scaler_init(now);
    r.note = strcat("the checkpoint's loss scaling was ", mode_then.empty() ? "?" : mode_then, " (scale ", s.scale,
                    "); this run's is ", mode_now, " (scale ", fresh.scale, "): the new one applies from step ", step + 1);
    t.scale = fresh.scale;
    t.growth_tracker = fresh.growth_tracker;
    t.hysteresis_left = fresh.hysteresis_left;
    t.overflow_at_min = 0;
    return r;
  }
  if (now.mode != ScaleMode::Dynamic) return r;
  std::string changed;
  auto clamp = [&](auto& v, auto lo, auto hi, const char* what, const char* key) {
    const auto before = v;
    if (v < lo) v = lo;
    if (v > hi) v = hi;
    if (v != before) changed += strcat(changed.empty() ? "" : "; ", what, " ", before, " -> ", v, " (", key, ")");
  };
  clamp(t.scale, now.min_scale, now.max_scale, "scale", "min_scale/max_scale");
  // Upper bounds only: a state the same settings produced is unchanged (bit-exact resume), and a
  // hysteresis counter at or below 0 (backing off on every overflow until the next growth) stays so.
  clamp(t.growth_tracker, int32_t(0), int32_t(now.growth_interval - 1), "growth tracker", "growth_interval");
  if (hysteresis_then > 0 && hysteresis_then != now.hysteresis) {
    // The overflows absorbed since the last growth (hysteresis_then - left) stay used.
    const int64_t moved = std::max<int64_t>(int64_t(t.hysteresis_left) + (int64_t(now.hysteresis) - hysteresis_then),
                                            int64_t(INT32_MIN));
    changed += strcat(changed.empty() ? "" : "; ", "hysteresis left ", t.hysteresis_left, " -> ",
                      std::min<int64_t>(moved, now.hysteresis), " (hysteresis ", hysteresis_then, " -> ", now.hysteresis, ")");
    t.hysteresis_left = int32_t(std::min<int64_t>(moved, now.hysteresis));
  }
  clamp(t.hysteresis_left, INT32_MIN, int32_t(now.hysteresis), "hysteresis left", "hysteresis");
  if (!changed.empty()) r.note = "the loss scaler's state was adapted to this run's settings: " + changed;
  return r;
}

}  // namespace amp
