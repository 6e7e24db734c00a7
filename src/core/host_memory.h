// The host memory a process may still take: MemAvailable of /proc/meminfo (what the kernel can give
// without swapping), or 0 when unknown. Memory checks before large allocations use it, so that a
// configuration too large for the machine is an error naming its key, not std::bad_alloc.
#pragma once

#include <cstddef>

namespace amp {

size_t host_memory_available();

// The most resident memory this process has had (VmHWM of /proc/self/status), or 0 when unknown.
size_t host_peak_resident();

}  // namespace amp
