// What `amp_ddp CONFIG --dry-run` prints after the resolved config: the run's shape as far as the
// config alone decides it (no data is read): a GPT's parameter count, each rank's training-state
// and activation bytes (optim/state_bytes.h, the model's activation_bytes) and the tokens of an
// optimizer step; the same for an MLP on synthetic data (its widths are in the config); for an MLP
// on files, or a GPT whose vocabulary comes from its token data, what is known.
#pragma once

#include <string>

#include "config/config.h"

namespace amp {

// Comment lines ("# ...") for a run on `world` ranks.
std::string dry_run_plan(const Config& cfg, int world);

}  // namespace amp
