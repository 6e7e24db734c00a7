// The text side of generation, shared by in-training samples (Trainer) and `amp_ddp sample`: a
// prompt encoded with the data's tokenizer and a sample decoded with it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace amp {

// prompt as tokens of `tokenizer` (data/tokenizer.h), or for token data that names none ("") as
// token ids separated by white space (text there is an error); an empty prompt is the last token
// id, vocab - 1. A token the vocabulary does not hold is a Config error naming `origin` (where the
// prompt came from) and the key `key`.
std::vector<int32_t> encode_prompt(const std::string& tokenizer, const std::string& prompt, int32_t vocab,
                                   const std::string& origin, const std::string& key);

// The tokens as text with `tokenizer`, or their ids separated by spaces when there is none.
std::string decode_sample(const std::string& tokenizer, const std::vector<int32_t>& tokens);

}  // namespace amp
