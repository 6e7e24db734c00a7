// Entry point of a training run (after the config is loaded and agreed on by every rank).
#pragma once

#include <string>

#include "comm/communicator.h"
#include "config/config.h"

namespace amp {

// Trains as the config says; returns the process exit code. Throws amp::Error on failure.
int run(const Config& cfg, Communicator& world);

}  // namespace amp
