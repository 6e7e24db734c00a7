#include "model/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace amp {

int32_t sample_token(const std::vector<float>& logits, double temperature, size_t top_k, double u) {
  AMP_CHECK(!logits.empty() && temperature > 0, "sample_token: no logits or temperature <= 0");
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t k = top_k == 0 || top_k > logits.size() ? logits.size() : top_k;
  std::partial_sort(order.begin(), order.begin() + long(k), order.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  const double top = double(logits[size_t(order[0])]);
  std::vector<double> p(k);
  double sum = 0;
  for (size_t i = 0; i < k; ++i) {
    const double z = (double(logits[size_t(order[i])]) - top) / temperature;
    p[i] = std::isfinite(z) ? std::exp(z) : 0.0;
    sum += p[i];
  }
  double acc = 0;
  for (size_t i = 0; i < k; ++i) {
    acc += p[i] / sum;
    if (u < acc) return order[i];
  }
  return order[k - 1];
}

std::vector<int32_t> generate(const std::vector<int32_t>& prompt, const SampleOptions& opt,
                              const std::function<std::vector<float>(const std::vector<int32_t>&)>& next_logits) {
  std::vector<int32_t> out = prompt;
  Rng rng(mix_seed(opt.seed, 0x5A3Bull, 0));
  for (size_t i = 0; i < opt.tokens; ++i) out.push_back(sample_token(next_logits(out), opt.temperature, opt.top_k, rng.uniform(0.0, 1.0)));
  return out;
}

namespace {

// Length of the valid UTF-8 sequence starting at s[i] (0: not one).
size_t utf8_length(const std::vector<int32_t>& s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned>(s[k]) & 0xFFu; };
  const unsigned c = byte(i);
  size_t n = 0;
  unsigned min = 0, cp = 0;
  if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F, min = 0x80;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F, min = 0x800;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07, min = 0x10000;
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

std::string detokenize(const std::vector<int32_t>& tokens, size_t vocab) {
  std::string s;
  if (vocab != 256) {
    for (int32_t t : tokens) s += (s.empty() ? "" : " ") + std::to_string(t);
    return s;
  }
  // Bytes as text: printable ASCII, newline and tab as they are, valid UTF-8 sequences as they are,
  // anything else escaped (\xNN), so the text is valid UTF-8 (metrics.jsonl holds it).
  for (size_t i = 0; i < tokens.size();) {
    const unsigned c = static_cast<unsigned>(tokens[i]) & 0xFFu;
    if (c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7F)) {
      s += char(c);
      ++i;
    } else if (const size_t n = c >= 0x80 ? utf8_length(tokens, i) : 0; n > 0) {
      for (size_t k = 0; k < n; ++k) s += char(static_cast<unsigned>(tokens[i + k]) & 0xFFu);
      i += n;
    } else {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02X", c);
      s += b;
      ++i;
    }
  }
  return s;
}

std::vector<int32_t> tokenize_bytes(const std::string& text) {
  std::vector<int32_t> t;
  for (unsigned char c : text) t.push_back(int32_t(c));
  return t;
}

}  // namespace amp
