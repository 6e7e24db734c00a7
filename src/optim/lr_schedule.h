// Learning-rate schedules, a function of the iteration (1-based, counting skipped steps, as PyTorch
// schedulers stepped every iteration):
//   constant        lr throughout
//   warmup_cosine   linear warm-up over warmup_steps, then cosine decay to min_lr over decay_steps
//   warmup_linear   linear warm-up, then linear decay to min_lr over decay_steps
//   wsd             warmup-stable-decay: linear warm-up, lr until the last decay_steps steps of the
//                   run, then linear decay to min_lr at its last step (extending the run extends
//                   the stable phase)
// decay_steps 0: cosine and linear decay until total_steps; wsd decays over the last fifth of the
// steps after warm-up. Given, it fixes the decay's length whatever run.steps is (cosine and linear
// then hold min_lr after it), so an extended or resumed run keeps its schedule.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace amp {

struct LrSchedule {
  enum class Kind { Constant, WarmupCosine, WarmupLinear, Wsd } kind = Kind::Constant;
  double lr = 1e-3, min_lr = 0.0;
  int64_t warmup_steps = 0, total_steps = 1, decay_steps = 0;

  double at(int64_t step) const {
    if (kind == Kind::Constant) return lr;
    if (warmup_steps > 0 && step <= warmup_steps) return lr * double(step) / double(warmup_steps);
    const int64_t after = total_steps - warmup_steps;  // steps after the warm-up
    if (kind == Kind::Wsd) {
      const int64_t decay = decay_steps > 0 ? decay_steps : std::max<int64_t>(1, after / 5);
      const int64_t start = total_steps - decay;  // the last stable step
      if (step <= start) return lr;
      const double t = std::min(1.0, double(step - start) / double(decay));
      return lr + (min_lr - lr) * t;
    }
    const int64_t decay = decay_steps > 0 ? decay_steps : after;
    if (decay <= 0) return lr;
    const double t = std::min(1.0, double(step - warmup_steps) / double(decay));
    if (kind == Kind::WarmupLinear) return lr + (min_lr - lr) * t;
    const double c = 0.5 * (1.0 + std::cos(M_PI * t));
    return min_lr + (lr - min_lr) * c;
  }
};

}  // namespace amp
