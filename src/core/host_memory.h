// The host memory a process may still take: MemAvailable of /proc/meminfo (what the kernel can give
// without swapping), or 0 when unknown. Memory checks before large allocations use it, so that a
// configuration too large for the machine is an error naming its key, not std::bad_alloc.
#pragma once

#include <cstddef>

namespace amp {

size_t host_memory_available();

}  // namespace amp
