#include "train/sample_text.h"

#include <memory>

#include "core/error.h"
#include "data/tokenizer.h"

namespace amp {

std::vector<int32_t> encode_prompt(const std::string& tokenizer, const std::string& prompt, int32_t vocab,
                                   const std::string& origin, const std::string& key) {
  const std::shared_ptr<const Tokenizer> tok = make_tokenizer(tokenizer);
  std::vector<int32_t> tokens = tok ? tok->encode(prompt) : std::vector<int32_t>{};
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      throw Error(ErrorKind::Config,
                  strcat("config error: ", origin, ": ", key, ": token ", i, " of the prompt (", tokenizer,
                         " tokenizer) is ", tokens[i], ", outside the model's vocabulary of ", vocab,
                         " tokens (model.vocab_size); use a prompt the vocabulary holds, or a larger vocabulary"));
  if (tokens.empty()) tokens.push_back(vocab - 1);
  return tokens;
}

std::string decode_sample(const std::string& tokenizer, const std::vector<int32_t>& tokens) {
  if (const std::shared_ptr<const Tokenizer> tok = make_tokenizer(tokenizer)) return tok->decode(tokens);
  std::string text;
  for (int32_t t : tokens) text += (text.empty() ? "" : " ") + std::to_string(t);
  return text;
}

}  // namespace amp
