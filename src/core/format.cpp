#include "core/format.h"

#include <cstdio>

namespace amp {

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 6) bytes /= 1024.0, ++u;
  char b[32];
  std::snprintf(b, sizeof b, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
  return b;
}

}  // namespace amp
