#include "data/tokenizer.h"

#include <cstdio>

#include "core/error.h"

namespace amp {

namespace {

// Length of the valid UTF-8 sequence starting at s[i] (0: not one); only ids below 256 are bytes.
size_t utf8_length(const std::vector<int32_t>& s, size_t i) {
  const auto byte = [&](size_t k) { return s[k] >= 0 && s[k] < 256 ? unsigned(s[k]) : 0u; };
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

class ByteTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "bytes"; }
  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int32_t> t;
    t.reserve(text.size());
    for (unsigned char c : text) t.push_back(int32_t(c));
    return t;
  }
  // Printable ASCII, newline and tab as they are, valid UTF-8 sequences as they are, other bytes
  // escaped (\xNN), ids beyond the bytes as <|id|>.
  std::string decode(const std::vector<int32_t>& tokens) const override {
    std::string s;
    for (size_t i = 0; i < tokens.size();) {
      const int32_t t = tokens[i];
      if (t < 0 || t > 255) {
        s += strcat("<|", t, "|>");
        ++i;
        continue;
      }
      const unsigned c = unsigned(t);
      if (c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7F)) {
        s += char(c);
        ++i;
      } else if (const size_t n = c >= 0x80 ? utf8_length(tokens, i) : 0; n > 0) {
        for (size_t k = 0; k < n; ++k) s += char(tokens[i + k]);
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
};

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name) {
  if (name == "bytes") return std::make_unique<ByteTokenizer>();
  if (name.empty()) return nullptr;
  throw Error(ErrorKind::Internal, strcat("unknown tokenizer \"", name, "\""));
}

}  // namespace amp
