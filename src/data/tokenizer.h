// Text to tokens and back for language models: the tokenizer a data set was made with, so that a
// prompt is encoded and a sample decoded the way the training text was. Two are here: "bytes"
// (each byte its token, data.format text without data.tokenizer) and "gpt2" (GPT-2's byte-level
// BPE, data/gpt2_bpe.h). A vocabulary larger than the tokenizer's (a padded model.vocab_size)
// decodes its extra ids as <|id|>.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace amp {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;  // "bytes", "gpt2"
  virtual int32_t vocab_size() const = 0;  // ids 0 .. vocab_size - 1 are tokens
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  // The token that separates documents (GPT-2's <|endoftext|>), -1 where there is none (bytes).
  virtual int32_t end_of_text() const { return -1; }
  // The bytes the tokens stand for (decode_bytes(encode(x)) == x); ids outside the vocabulary as
  // <|id|>.
  virtual std::string decode_bytes(const std::vector<int32_t>& tokens) const = 0;
  // Valid UTF-8 (metrics.jsonl holds it): decode_bytes with what cannot be shown as text escaped.
  virtual std::string decode(const std::vector<int32_t>& tokens) const { return printable_text(decode_bytes(tokens)); }

  // Printable ASCII, newline and tab as they are, valid UTF-8 sequences as they are, other bytes
  // escaped as \xNN.
  static std::string printable_text(std::string_view bytes);
};

// The tokenizer a data set names (Dataset::tokenizer): "bytes", "gpt2" (loaded once per process,
// then shared), or nullptr for "" (token shards without a known tokenizer). An unknown name is an
// internal error (config validation names the choices); gpt2 without its files a Data error.
std::shared_ptr<const Tokenizer> make_tokenizer(const std::string& name);

// The tokenizer data.tokenizer names for data.format ("auto": bytes for text, none for tokens;
// "none": ""), as make_tokenizer takes it.
std::string data_tokenizer_name(const std::string& key_value, const std::string& format);
// A tokenizer's vocabulary size without loading it (0 for ""): for plans made before data is read.
int32_t tokenizer_vocab_size(const std::string& name);

}  // namespace amp
