#include "train/sample_text.h"

#include <cctype>
#include <charconv>
#include <climits>
#include <memory>
#include <string_view>

#include "core/error.h"
#include "core/format.h"
#include "data/tokenizer.h"

namespace amp {

namespace {

// Without a tokenizer a prompt is token ids separated by white space, as samples print them; text
// there is a Config error, not a prompt silently left out.
std::vector<int32_t> prompt_ids(const std::string& prompt, const std::string& origin, const std::string& key) {
  std::vector<int32_t> ids;
  const char* p = prompt.data();
  const char* end = p + prompt.size();
  for (;;) {
    while (p < end && std::isspace(static_cast<unsigned char>(*p))) ++p;
    if (p == end) return ids;
    const char* word = p;
    while (p < end && !std::isspace(static_cast<unsigned char>(*p))) ++p;
    int64_t id = -1;
    const auto [stop, ec] = std::from_chars(word, p, id);
    if (ec != std::errc() || stop != p || id > INT32_MAX)
      throw Error(ErrorKind::Config,
                  strcat("config error: ", origin, ": ", key, ": \"", printable(std::string_view(word, size_t(p - word)), 40),
                         "\" is not a token id: the model's data names no tokenizer (data.tokenizer none), so a prompt is ",
                         "token ids separated by spaces, as its samples print them (\"50256 464\")"));
    ids.push_back(int32_t(id));
  }
}

}  // namespace

std::vector<int32_t> encode_prompt(const std::string& tokenizer, const std::string& prompt, int32_t vocab,
                                   const std::string& origin, const std::string& key) {
  const std::shared_ptr<const Tokenizer> tok = make_tokenizer(tokenizer);
  std::vector<int32_t> tokens = tok ? tok->encode(prompt) : prompt_ids(prompt, origin, key);
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      throw Error(ErrorKind::Config,
                  strcat("config error: ", origin, ": ", key, ": token ", i, " of the prompt (",
                         tok ? tokenizer + " tokenizer" : std::string("token ids"), ") is ", tokens[i],
                         ", outside the model's vocabulary of ", vocab,
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
