// Text generation from a language model: temperature and top-k sampling of the next token, seeded,
// one token at a time (each a forward over the last seq_len tokens; no KV cache: the models here
// are small and sampling runs once per sample_interval).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace amp {

struct SampleOptions {
  size_t tokens = 200;
  double temperature = 0.8;  // > 0
  size_t top_k = 40;         // 0: the whole vocabulary
  uint64_t seed = 1;
};

// Draws the next token from logits: softmax(logits / temperature) restricted to the top_k largest
// (ties broken by the lower token id), with u uniform in [0, 1).
int32_t sample_token(const std::vector<float>& logits, double temperature, size_t top_k, double u);

// Extends `prompt` by opt.tokens tokens; next_logits(context) gives the logits of the next token.
// When stop is given and returns true before a token, generation ends there (the tokens so far).
std::vector<int32_t> generate(const std::vector<int32_t>& prompt, const SampleOptions& opt,
                              const std::function<std::vector<float>(const std::vector<int32_t>&)>& next_logits,
                              const std::function<bool()>& stop = {});

}  // namespace amp
