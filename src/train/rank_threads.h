// How many CPU threads a rank computes with (run.threads): the same rule for training and eval.
#pragma once

#include <cstdint>

namespace amp {

// The CPUs this rank may use: those a binding launcher gave it, else its share of the node.
int cpus_per_rank(int local_size);
// CPU threads per rank: what the config says, else all the CPUs of this rank.
int pick_threads(int64_t configured, int local_size);

}  // namespace amp
