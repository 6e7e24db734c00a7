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

std::string printable(std::string_view bytes, size_t max_bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size() && i < max_bytes; ++i) {
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += char(c);
    }
  }
  if (bytes.size() > max_bytes) out += "...";
  return out;
}

}  // namespace amp
