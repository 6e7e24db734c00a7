// In-memory data sets and their loaders: IDX (raw or gzip; u8/i8/i16/i32/f32/f64 elements; any
// dimensions), CSV (numeric columns, optional header, target column by name or index), the
// synthetic regression of the seed lecture, and token streams for language modelling (text files
// as bytes, llm.c token shards). Features are FP32, row-major, one row per sample; a language-model
// set holds its token stream instead and cuts it into windows.
// Every loader error is an amp::Error of kind Data whose message names the file and the place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/token_stream.h"

namespace amp {

enum class Task { Classification, Regression, LanguageModel };

// The most classes a classification data set may have (data.n_classes' bound too).
constexpr int64_t kMaxClasses = int64_t(1) << 24;

struct Dataset {
  std::string source;          // file name(s) or "synthetic", for messages
  Task task = Task::Classification;
  size_t n = 0;                // samples
  size_t n_features = 0;       // features per sample (flattened)
  std::vector<float> x;        // n * n_features
  int n_classes = 0;           // classification: labels are in [0, n_classes)
  std::vector<int32_t> labels; // classification: n
  size_t n_targets = 0;        // regression: outputs per sample
  std::vector<float> y;        // regression: n * n_targets
  // Language model (x, labels and y stay empty): n = (tokens.size() - 1) / seq_len non-overlapping
  // windows; window i is tokens[i*T .. i*T + T] inclusive (T + 1 tokens, T = seq_len): the inputs
  // are its first T tokens, the targets its last T. n_features = seq_len; every token is in
  // [0, vocab). Windows are the samples the sampler and eval_shard index.
  TokenStream tokens;          // the token stream (shards stay in their files, read as needed)
  size_t seq_len = 0;          // T
  int vocab = 0;               // output classes of every position
  std::string tokenizer;       // what made the tokens (data/tokenizer.h): "bytes" for text, "" unknown

  size_t n_outputs() const {
    return task == Task::Classification ? size_t(n_classes) : task == Task::LanguageModel ? size_t(vocab) : n_targets;
  }
  // Language model: window i's T + 1 tokens into out (inputs out[0..T), targets out[1..T]).
  void copy_window(size_t i, int32_t* out) const { tokens.copy(i * seq_len, seq_len + 1, out); }
};

// ---- IDX ---------------------------------------------------------------------------------
// An IDX array as stored: its dimensions and its elements converted to float (exact for every
// IDX element type except f64, which is rounded). gzip is recognized by its magic bytes, not
// by the file name.
struct IdxArray {
  std::vector<size_t> dims;
  uint8_t type_code = 0;       // 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64
  std::vector<float> data;     // product(dims) elements
};
IdxArray read_idx(const std::string& path);

// Images + labels. u8 images are scaled to [0, 1] (x / 255); other element types are taken as
// they are. Labels must be integers in [0, n_classes); n_classes = 0 infers max label + 1.
// Errors name the file and the element index of a bad label.
Dataset load_idx_dataset(const std::string& images_path, const std::string& labels_path,
                         int n_classes);

// ---- CSV ---------------------------------------------------------------------------------
struct CsvOptions {
  bool header = true;          // first line holds column names
  std::string target;          // column name (needs header) or 0-based index; "" = last column
  Task task = Task::Classification;
  int n_classes = 0;           // classification: 0 infers max label + 1
};
// Every cell must parse as a number; classification targets must be non-negative integers.
// Ragged rows, empty files and bad cells are errors naming file:line:column.
Dataset load_csv(const std::string& path, const CsvOptions& opt);

// Deterministic split: a seeded shuffle, then the first round(fraction * n) samples go to eval.
// Returns {train, eval}.
std::pair<Dataset, Dataset> split_dataset(const Dataset& all, double eval_fraction, uint64_t seed);

// ---- synthetic ---------------------------------------------------------------------------
// The seed lecture's regression: x ~ N(0, 1)^features, y = W x + b + noise * N(0, 1) with W, b
// fixed by `seed` (W, b ~ N(0, 1/features)); train and eval draw x with different streams.
struct SyntheticOptions {
  size_t n = 1024;
  size_t features = 10;
  size_t outputs = 1;
  double noise = 0.1;
  uint64_t seed = 1;
  uint64_t stream = 0;         // 0 = train, 1 = eval: same W, b, other samples
};
Dataset make_synthetic_regression(const SyntheticOptions& opt);

// ---- normalization -----------------------------------------------------------------------
enum class Normalization { None, Global, PerFeature };
// Statistics fitted on the training set and applied to train and eval alike.
struct Normalizer {
  Normalization mode = Normalization::None;
  std::vector<float> mean, inv_std;  // one value (Global) or one per feature (PerFeature)
  size_t n_features = 0;             // of the fitted set; apply() checks it (Internal error)
  void fit(const Dataset& train, Normalization m);
  void apply(Dataset& d) const;      // constant features (std 0) are only centred
};

// ---- language modelling ------------------------------------------------------------------
// Every path or glob pattern (glob(3): * ? [..]) of `patterns`, in order; a pattern's matches are
// sorted by bytes. A pattern that matches nothing is an error naming it and `key` (the config key);
// so is a file reached twice (also through a symbolic link, such as the fortunes package's NAME.u8
// links to NAME). A plain path is taken as it is (its reader reports a missing file).
std::vector<std::string> expand_paths(const std::vector<std::string>& patterns, const std::string& key);

// A text file's bytes; an empty, missing or unreadable file and a NUL byte are Data errors naming it.
std::string read_text_file(const std::string& path);

// Text files as tokens of `tokenizer` (data/tokenizer.h), concatenated in order, held in memory:
// bytes (each byte its token, 0..255), or GPT-2's BPE with <|endoftext|> before each file (as data
// preparation writes documents). An empty, missing or unreadable file, and a file with a NUL byte
// (binary, such as an index file a glob matched), are errors naming the file.
class Tokenizer;
TokenStream read_text_tokens(const std::vector<std::string>& paths, const Tokenizer& tokenizer);

// llm.c's token shards, as its writer (the data_common module of its dev/data) makes them: 256 int32
// little-endian (header[0] = magic, header[1] = version, header[2] = token count N), then N
// tokens: magic 20240520 version 1 (GPT-2: uint16 tokens) or magic 20240801 version 7 (LLaMA 3:
// uint32 tokens); the file is exactly 1024 + N x the token width bytes. Every field and the size
// are checked (errors name the file and what is wrong); the tokens stay in the file, read as needed.
constexpr int32_t kTokenShardMagic = 20240520;
constexpr int32_t kTokenShardVersion = 1;
constexpr int32_t kTokenShard32Magic = 20240801;
constexpr int32_t kTokenShard32Version = 7;
constexpr size_t kTokenShardHeaderInts = 256;
TokenStream read_token_shard(const std::string& path);
// The shards in order, concatenated.
TokenStream read_token_shards(const std::vector<std::string>& paths);

// The largest token (-1 for an empty stream; a uint32 token >= 2^31 counts as negative).
int64_t max_token(const TokenStream& tokens);
// Every token in [0, vocab); the first one outside is an error naming its file, its index in that
// file and the vocabulary (`vocab_key`: where it came from, for the message).
void check_tokens(const TokenStream& tokens, int vocab, const char* vocab_key);

// A language-model data set over `tokens` with windows of seq_len (>= 1) tokens and `vocab`
// classes. Fewer than seq_len + 1 tokens is an error saying how many are needed; so is a token
// outside [0, vocab) (checked unless `checked`: the caller did) and more windows than the sampler
// can index (2^32 - 1).
Dataset make_lm_dataset(TokenStream tokens, size_t seq_len, int vocab, const std::string& name, bool checked = false);

// Splits a token stream before its last round(fraction * size) tokens: {train part, eval part};
// windows cut from each never straddle the split. fraction in (0, 1); an empty part is an error.
std::pair<TokenStream, TokenStream> split_token_stream(const TokenStream& tokens, double fraction, const std::string& name);

}  // namespace amp
