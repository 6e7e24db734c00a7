// Text generation from a language model: temperature, top-k and top-p (nucleus) sampling of the
// next token, seeded, one token at a time (the logits from a TokenDecoder, model/model.h, which
// caches what it computed for the context).
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
  double top_p = 1.0;        // in (0, 1]; 1: no nucleus cut
  uint64_t seed = 1;
};

// Draws the next token from logits: softmax(logits / temperature) restricted to the top_k largest
// (ties broken by the lower token id), then to the fewest of those, likeliest first, whose
// probabilities (within the top k) sum to top_p or more, renormalized; u uniform in [0, 1).
int32_t sample_token(const std::vector<float>& logits, double temperature, size_t top_k, double top_p, double u);

// Extends `prompt` by opt.tokens tokens; next_logits(context) gives the logits of the next token.
// When stop is given and returns true before a token, generation ends there (the tokens so far).
std::vector<int32_t> generate(const std::vector<int32_t>& prompt, const SampleOptions& opt,
                              const std::function<std::vector<float>(const std::vector<int32_t>&)>& next_logits,
                              const std::function<bool()>& stop = {});

}  // namespace amp
