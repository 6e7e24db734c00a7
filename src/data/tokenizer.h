// Text to tokens and back for language models: the tokenizer a data set was made with, so that a
// prompt is encoded and a sample decoded the way the training text was. Byte-level text (each byte
// its token, data.format text) is the one here; a vocabulary larger than the tokenizer's (a
// model.vocab_size above 256 on byte text) decodes its extra ids as <|id|>.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace amp {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;  // "bytes"
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  // Valid UTF-8 (metrics.jsonl holds it): what cannot be shown as text is escaped.
  virtual std::string decode(const std::vector<int32_t>& tokens) const = 0;
};

// The tokenizer a data set names (Dataset::tokenizer): "bytes", or nullptr for "" (token shards
// without a known tokenizer).
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name);

}  // namespace amp
