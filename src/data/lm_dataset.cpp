// Language-model data sets over a token stream: check_tokens() (the vocabulary, naming the file of
// a bad token), make_lm_dataset() (non-overlapping windows of seq_len + 1 tokens) and
// split_token_stream() (the evaluation part is the end of the stream).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "data/dataset.h"

namespace amp {

int64_t max_token(const TokenStream& tokens) {
  int64_t top = -1;
  tokens.scan([&](size_t, const int32_t* t, size_t n) {
    for (size_t i = 0; i < n; ++i) top = std::max<int64_t>(top, t[i]);
  });
  return top;
}

void check_tokens(const TokenStream& tokens, int vocab, const char* vocab_key) {
  tokens.scan([&](size_t first, const int32_t* t, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      if (t[i] >= 0 && t[i] < vocab) continue;
      const auto [file, index] = tokens.where(first + i);
      // A 32-bit token of 2^31 or more reads as negative here: no vocabulary holds it (and the
      // largest token + 1 counts only those below).
      if (t[i] < 0)
        throw Error(ErrorKind::Data, strcat("data error: ", file, ": token ", index, " (0-based) is ", uint32_t(t[i]),
                                            ": token ids must be below 2^31 (2147483648)"));
      throw Error(ErrorKind::Data, strcat("data error: ", file, ": token ", index, " (0-based) is ", t[i],
                                          ", outside the vocabulary [0, ", vocab, ") (", vocab_key, ")"));
    }
  });
}

Dataset make_lm_dataset(TokenStream tokens, size_t seq_len, int vocab, const std::string& name, bool checked) {
  if (seq_len == 0) throw Error(ErrorKind::Data, strcat("data error: ", name, ": model.seq_len must be >= 1"));
  if (vocab <= 0) throw Error(ErrorKind::Data, strcat("data error: ", name, ": the vocabulary must not be empty"));
  if (tokens.size() < seq_len + 1)
    throw Error(ErrorKind::Data,
                strcat("data error: ", name, ": ", tokens.size(), " tokens are too few for one window of model.seq_len = ",
                       seq_len, ": a window needs ", seq_len + 1, " tokens (inputs and the next token of each)"));
  if (!checked) check_tokens(tokens, vocab, "the vocabulary size");
  const size_t n = (tokens.size() - 1) / seq_len;
  if (n > size_t(UINT32_MAX))
    throw Error(ErrorKind::Data, strcat("data error: ", name, ": ", tokens.size(), " tokens make ", n,
                                        " windows of model.seq_len = ", seq_len,
                                        ", more than the 4294967295 a data set may have; give fewer files"));
  Dataset d;
  d.source = name;
  d.task = Task::LanguageModel;
  d.n = n;
  d.n_features = seq_len;
  d.seq_len = seq_len;
  d.vocab = vocab;
  d.tokens = std::move(tokens);
  return d;
}

std::pair<TokenStream, TokenStream> split_token_stream(const TokenStream& tokens, double fraction, const std::string& name) {
  if (!(fraction > 0.0 && fraction < 1.0))
    throw Error(ErrorKind::Data, strcat("data error: ", name, ": eval fraction ", fraction, " is not in (0, 1)"));
  const size_t total = tokens.size();
  const size_t n_eval = static_cast<size_t>(std::llround(fraction * double(total)));
  if (n_eval == 0 || n_eval >= total)
    throw Error(ErrorKind::Data, strcat("data error: ", name, ": an eval fraction of ", fraction, " of ", total,
                                        " tokens leaves the ", n_eval == 0 ? "eval" : "train", " part empty"));
  return {tokens.slice(0, total - n_eval), tokens.slice(total - n_eval, total)};
}

}  // namespace amp
