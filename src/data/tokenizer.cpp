#include "data/tokenizer.h"

#include <cstdio>
#include <map>
#include <mutex>

#include "core/error.h"
#include "data/gpt2_bpe.h"

namespace amp {

namespace {

// Length of the valid UTF-8 sequence starting at s[i] (0: not one).
size_t utf8_length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return unsigned(static_cast<unsigned char>(s[k])); };
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
  int32_t vocab_size() const override { return 256; }
  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int32_t> t;
    t.reserve(text.size());
    for (unsigned char c : text) t.push_back(int32_t(c));
    return t;
  }
  std::string decode_bytes(const std::vector<int32_t>& tokens) const override {
    std::string s;
    for (const int32_t t : tokens) s += t >= 0 && t < 256 ? std::string(1, char(t)) : strcat("<|", t, "|>");
    return s;
  }
};

}  // namespace

std::string Tokenizer::printable_text(std::string_view bytes) {
  std::string s;
  s.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const unsigned c = static_cast<unsigned char>(bytes[i]);
    if (c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7F)) {
      s += char(c);
      ++i;
    } else if (const size_t n = c >= 0x80 ? utf8_length(bytes, i) : 0; n > 0) {
      s.append(bytes.substr(i, n));
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

std::string data_tokenizer_name(const std::string& key_value, const std::string& format) {
  if (key_value == "auto") return format == "text" ? "bytes" : "";
  return key_value == "none" ? "" : key_value;
}

int32_t tokenizer_vocab_size(const std::string& name) {
  return name == "bytes" ? 256 : name == "gpt2" ? Gpt2Bpe::kVocab : 0;
}

std::shared_ptr<const Tokenizer> make_tokenizer(const std::string& name) {
  if (name.empty()) return nullptr;
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const Tokenizer>> loaded;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = loaded.find(name); it != loaded.end()) return it->second;
  std::shared_ptr<const Tokenizer> t;
  if (name == "bytes") t = std::make_shared<ByteTokenizer>();
  else if (name == "gpt2") t = std::make_shared<Gpt2Bpe>(gpt2_vocab_dir());
  else throw Error(ErrorKind::Internal, strcat("unknown tokenizer \"", name, "\""));
  loaded[name] = t;
  return t;
}

}  // namespace amp
