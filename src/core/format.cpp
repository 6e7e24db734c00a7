#include "core/format.h"

#include <algorithm>
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

namespace {

// The length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlong forms, no
// surrogates, nothing past U+10FFFF), 0 when the bytes there are not one.
size_t utf8_length(std::string_view s, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = at(i);
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  else return 0;
  if (i + n > s.size() || at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (at(i + k) < 0x80 || at(i + k) > 0xBF) return 0;
  return n;
}

}  // namespace

std::string printable(std::string_view bytes, size_t max_bytes) {
  std::string out;
  const size_t shown = std::min(bytes.size(), max_bytes);
  for (size_t i = 0; i < shown;) {
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    const size_t n = c < 0x80 ? (c < 0x20 || c == 0x7f ? 0 : 1) : utf8_length(bytes, i);
    if (i + n > shown) break;  // a character the cut would split: "..." stands for it
    if (n == 0) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
      ++i;
    } else {
      out.append(bytes.data() + i, n);
      i += n;
    }
  }
  if (bytes.size() > max_bytes) out += "...";
  return out;
}

}  // namespace amp
