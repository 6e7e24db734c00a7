#include "core/host_memory.h"

#include <cstdio>

namespace amp {

namespace {

// The "<key>: <n> kB" line of a /proc file, in bytes; 0 when absent.
size_t proc_kib_line(const char* path, const char* format) {
  std::FILE* f = std::fopen(path, "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kib = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, format, &kib) == 1) break;
  std::fclose(f);
  return size_t(kib) * 1024;
}

}  // namespace

size_t host_memory_available() { return proc_kib_line("/proc/meminfo", "MemAvailable: %llu kB"); }

size_t host_peak_resident() { return proc_kib_line("/proc/self/status", "VmHWM: %llu kB"); }

}  // namespace amp
