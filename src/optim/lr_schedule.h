// Learning-rate schedules: constant, and linear warm-up then cosine decay to min_lr. A function of
// the iteration (1-based, counting skipped steps, as PyTorch schedulers stepped every iteration).
#pragma once

#include <cmath>
#include <cstdint>

namespace amp {

struct LrSchedule {
  enum class Kind { Constant, WarmupCosine } kind = Kind::Constant;
  double lr = 1e-3, min_lr = 0.0;
  int64_t warmup_steps = 0, total_steps = 1;

  double at(int64_t step) const {
    if (kind == Kind::Constant) return lr;
    if (warmup_steps > 0 && step <= warmup_steps) return lr * double(step) / double(warmup_steps);
    const int64_t decay = total_steps - warmup_steps;
    if (decay <= 0) return lr;
    const double t = double(step - warmup_steps) / double(decay);
    const double c = 0.5 * (1.0 + std::cos(M_PI * (t > 1.0 ? 1.0 : t)));
    return min_lr + (lr - min_lr) * c;
  }
};

}  // namespace amp
