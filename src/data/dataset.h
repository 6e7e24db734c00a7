// In-memory data sets and their loaders: IDX (raw or gzip; u8/i8/i16/i32/f32/f64 elements; any
// dimensions), CSV (numeric columns, optional header, target column by name or index) and the
// synthetic regression of the seed lecture. Features are FP32, row-major, one row per sample.
// Every loader error is an amp::Error of kind Data whose message names the file and the place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace amp {

enum class Task { Classification, Regression };

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

  size_t n_outputs() const { return task == Task::Classification ? size_t(n_classes) : n_targets; }
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

}  // namespace amp
