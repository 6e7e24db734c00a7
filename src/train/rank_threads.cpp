#include "train/rank_threads.h"

#include <sched.h>

#include <algorithm>
#include <thread>

namespace amp {

int cpus_per_rank(int local_size) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
  int allowed = hw;
  if (sched_getaffinity(0, sizeof set, &set) == 0) allowed = CPU_COUNT(&set);
  if (allowed < hw) return std::max(1, allowed);
  return std::max(1, hw / std::max(1, local_size));
}

int pick_threads(int64_t configured, int local_size) {
  return configured > 0 ? int(configured) : cpus_per_rank(local_size);
}

}  // namespace amp
