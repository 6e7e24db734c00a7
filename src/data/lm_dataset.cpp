// Language-model data sets over a token stream: check_tokens() (the vocabulary, naming the file of
// a bad token), make_lm_dataset() (non-overlapping windows of seq_len + 1 tokens) and
// split_token_stream() (the evaluation part is the end of the stream).
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "data/dataset.h"

namespace amp {

void check_tokens(const std::vector<int32_t>& tokens, int vocab, const TokenSources& source, const char* vocab_key) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= 0 && tokens[i] < vocab) continue;
    // The file holding token i: the last source that starts at or before it.
    std::string file = "<tokens>";
    size_t first = 0;
    for (const auto& s : source)
      if (s.second <= i) file = s.first, first = s.second;
    throw Error(ErrorKind::Data, strcat("data error: ", file, ": token ", i - first, " (0-based) is ", tokens[i],
                                        ", outside the vocabulary [0, ", vocab, ") (", vocab_key, ")"));
  }
}

Dataset make_lm_dataset(std::vector<int32_t> tokens, size_t seq_len, int vocab, const std::string& name) {
  if (seq_len == 0) throw Error(ErrorKind::Data, strcat("data error: ", name, ": model.seq_len must be >= 1"));
  if (vocab <= 0) throw Error(ErrorKind::Data, strcat("data error: ", name, ": the vocabulary must not be empty"));
  if (tokens.size() < seq_len + 1)
    throw Error(ErrorKind::Data,
                strcat("data error: ", name, ": ", tokens.size(), " tokens are too few for one window of model.seq_len = ",
                       seq_len, ": a window needs ", seq_len + 1, " tokens (inputs and the next token of each)"));
  check_tokens(tokens, vocab, {{name, 0}}, "the vocabulary size");
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

std::pair<std::vector<int32_t>, std::vector<int32_t>> split_token_stream(std::vector<int32_t> tokens, double fraction,
                                                                         const std::string& name) {
  if (!(fraction > 0.0 && fraction < 1.0))
    throw Error(ErrorKind::Data, strcat("data error: ", name, ": eval fraction ", fraction, " is not in (0, 1)"));
  const size_t total = tokens.size();
  const size_t n_eval = static_cast<size_t>(std::llround(fraction * double(total)));
  if (n_eval == 0 || n_eval >= total)
    throw Error(ErrorKind::Data, strcat("data error: ", name, ": an eval fraction of ", fraction, " of ", total,
                                        " tokens leaves the ", n_eval == 0 ? "eval" : "train", " part empty"));
  std::vector<int32_t> eval(tokens.end() - std::ptrdiff_t(n_eval), tokens.end());
  tokens.resize(total - n_eval);
  tokens.shrink_to_fit();
  return {std::move(tokens), std::move(eval)};
}

}  // namespace amp
