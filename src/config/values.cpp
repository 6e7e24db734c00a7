// Scalar values of the config: parsing (numbers, integers, booleans, .inf), range checks against
// the key table, the FP32 representability rule, formatting, and the typo suggestions.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "config/config_detail.h"

namespace amp::config_detail {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// Closest candidate within a distance that still looks like a typo, or "".
std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const auto& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  return best_d <= limit ? best : "";
}

std::string format_number(double v) {
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// The shortest text that reads back as the same float (0.9f prints "0.9", not 0.899999976...).
std::string format_float(float v) {
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string describe_range(const Range& r, bool integer) {
  const char* noun = integer ? "an integer" : "a number";
  const bool has_lo = std::isfinite(r.lo), has_hi = std::isfinite(r.hi) && r.hi < kFloatMax;
  const std::string tail = r.inf_ok ? " or .inf" : "";
  if (has_lo && !has_hi) {
    if (r.lo == 0 && r.lo_open) return (integer ? "a positive integer" : "a positive number") + tail;
    if (r.lo == 0) return (integer ? "a non-negative integer" : "a non-negative number") + tail;
    return std::string(noun) + (r.lo_open ? " > " : " >= ") + format_number(r.lo) + tail;
  }
  const auto num = [&](double v) { return integer ? std::to_string(int64_t(v)) : format_number(v); };
  if (has_lo && has_hi)
    return std::string(noun) + " in " + (r.lo_open ? "(" : "[") + num(r.lo) + ", " + num(r.hi) +
           (r.hi_open ? ")" : "]");
  return noun;
}

bool in_range(double v, const Range& r) {
  if (!std::isfinite(v) && !(r.inf_ok && v > 0)) return false;
  if (r.lo_open ? !(v > r.lo) : !(v >= r.lo)) return false;
  if (r.hi_open ? !(v < r.hi) : !(v <= r.hi)) return false;
  return true;
}

// Why a parsed number cannot be used as an FP32 value ("" when it can).
std::string float_problem(double v, const Range& r) {
  if (std::isnan(v)) return "not a number";
  if (std::isinf(v)) return r.inf_ok && v > 0 ? "" : "not finite";
  if (std::fabs(v) > kFloatMax) return "beyond the FP32 range (|x| <= 3.4e38) the step computes in";
  if (v != 0 && float(v) == 0.0f) return "too small for FP32 (it would become 0)";
  return "";
}

bool parse_double(const std::string& s, double& out) {
  static const char* kPosInf[] = {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"};
  static const char* kNegInf[] = {"-.inf", "-.Inf", "-.INF"};
  for (const char* t : kPosInf)
    if (s == t) return out = kInf, true;
  for (const char* t : kNegInf)
    if (s == t) return out = -kInf, true;
  if (s.empty()) return false;
  const char* b = s.data();
  const char* e = b + s.size();
  if (*b == '+') ++b;
  auto r = std::from_chars(b, e, out);
  return r.ec == std::errc() && r.ptr == e && !std::isnan(out);
}

bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  const char* b = s.data();
  const char* e = b + s.size();
  if (*b == '+') ++b;
  auto r = std::from_chars(b, e, out);
  if (r.ec == std::errc() && r.ptr == e) return true;
  // Accept integral values written as floats ("1e3", "2.0"), nothing else.
  double d;
  if (parse_double(s, d) && std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) {
    out = static_cast<int64_t>(d);
    return true;
  }
  return false;
}

bool parse_bool(const std::string& s, bool& out) {
  static const char* kTrue[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
  static const char* kFalse[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"};
  for (const char* t : kTrue)
    if (s == t) return out = true, true;
  for (const char* t : kFalse)
    if (s == t) return out = false, true;
  return false;
}

std::string one_of(const std::vector<const char*>& choices) {
  std::string s;
  for (size_t i = 0; i < choices.size(); ++i)
    s += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + std::string(choices[i]);
  return s;
}

std::string record_shape(const Key& key) {
  std::string s = "{";
  for (size_t i = 0; i < key.record.size(); ++i) s += (i ? ", " : "") + std::string(key.record[i].name);
  return s + "}";
}

}  // namespace amp::config_detail
