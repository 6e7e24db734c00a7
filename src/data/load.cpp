#include "data/load.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/format.h"
#include "core/host_memory.h"
#include "core/hash.h"
#include "data/prepare.h"
#include "data/tokenizer.h"

namespace amp {

namespace {

// Training on a NaN input diverges with advice about the learning rate; say what is wrong instead.
void check_finite(const Dataset& d, const char* when) {
  const auto scan = [&](const std::vector<float>& v, size_t per_sample, const char* what) {
    for (size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(v[i]))
        throw Error(ErrorKind::Data, strcat("data error: ", d.source, ": sample ", i / per_sample, " (0-based, in file order), ",
                                            what, " ", i % per_sample, " is ", v[i], when,
                                            ": every input must be a finite FP32 number"));
  };
  if (d.n == 0) return;
  scan(d.x, d.n_features, "feature");
  if (d.n_targets) scan(d.y, d.n_targets, "target");
}

// "a", "a (and 1 more file)" or "a (and 40 more files)": a file list for messages.
std::string describe_files(const std::vector<std::string>& files) {
  if (files.size() == 1) return files[0];
  return strcat(files[0], " (and ", files.size() - 1, files.size() == 2 ? " more file)" : " more files)");
}

// Language modelling (data.format text or tokens): one token stream for training and one for
// evaluation (eval shards, or the end of the training stream), windows of model.seq_len + 1 tokens.
DataSets load_lm_datasets(const Config& cfg, DataUse use) {
  const auto& d = cfg.data;
  const bool text = d.format == "text";
  const bool eval_only = use == DataUse::EvaluationOnly;
  // Token shards name their tokenizer for prompts and samples only: its files are not read here.
  const std::string tokenizer = data_tokenizer_name(d.tokenizer, d.format);
  // Evaluation shards with a vocabulary known without the training tokens: those are not read.
  const bool skip_train = eval_only && !text && !d.eval_tokens.empty() && (cfg.model.vocab_size > 0 || !tokenizer.empty());
  const char* train_key = text ? "data.text_files" : "data.train_tokens";
  const std::vector<std::string> train_files =
      skip_train ? std::vector<std::string>() : expand_paths(text ? d.text_files : d.train_tokens, train_key);
  TokenStream train = skip_train ? TokenStream()
                      : text     ? read_text_tokens(train_files, *make_tokenizer(tokenizer))
                                 : read_token_shards(train_files);
  std::string train_name = skip_train ? std::string("data.train_tokens (not read)") : describe_files(train_files), eval_name;
  TokenStream eval;
  std::vector<std::string> eval_files;
  if (!text && !d.eval_tokens.empty()) {
    eval_files = expand_paths(d.eval_tokens, "data.eval_tokens");
    for (const auto& e : eval_files)
      for (const auto& t : train_files) {
        std::error_code ec;
        if (std::filesystem::equivalent(e, t, ec) && !ec)
          throw Error(ErrorKind::Data, strcat("data error: ", e, ": is both an evaluation shard (data.eval_tokens) and a ",
                                              "training shard (data.train_tokens", e == t ? "" : strcat(": ", t), ")"));
      }
    eval = read_token_shards(eval_files);
    eval_name = describe_files(eval_files);
  }
  if (!text) check_prepared_shards(train_files, eval_files, tokenizer);

  // The vocabulary: model.vocab_size, else the tokenizer's, else the largest token + 1.
  int vocab = int(cfg.model.vocab_size);
  std::string vocab_key = strcat("model.vocab_size = ", vocab);
  if (vocab == 0 && !tokenizer.empty()) {
    vocab = tokenizer_vocab_size(tokenizer);
    vocab_key = strcat("the ", tokenizer, " tokenizer's vocabulary (data.tokenizer)");
  } else if (vocab == 0) {
    const int64_t top = std::max(max_token(train), max_token(eval));
    vocab = int(std::clamp<int64_t>(top + 1, 1, INT32_MAX));
    vocab_key = "model.vocab_size = 0: the largest token + 1";
  }
  check_tokens(train, vocab, vocab_key.c_str());
  check_tokens(eval, vocab, vocab_key.c_str());

  if (eval_name.empty() && d.eval_fraction > 0) {
    const size_t total = train.size();
    auto parts = split_token_stream(train, d.eval_fraction, train_name);
    train = std::move(parts.first);
    eval = std::move(parts.second);
    eval_name = strcat(train_name, " [eval: the last ", eval.size(), " of ", total, " tokens]");
    train_name = strcat(train_name, " [train: the first ", train.size(), " of ", total, " tokens]");
  }
  const size_t seq_len = size_t(cfg.model.seq_len);
  DataSets out;
  if (eval_only) {  // the model's shape alone: no windows to draw
    out.train.source = train_name;
    out.train.task = Task::LanguageModel;
    out.train.n_features = out.train.seq_len = seq_len;
    out.train.vocab = vocab;
  } else {
    out.train = make_lm_dataset(std::move(train), seq_len, vocab, train_name, true);
  }
  if (!eval_name.empty()) out.eval = make_lm_dataset(std::move(eval), seq_len, vocab, eval_name, true);
  out.train.tokenizer = out.eval.tokenizer = tokenizer;
  return out;
}

}  // namespace

DataSets load_datasets(const Config& cfg, DataUse use) {
  const auto& d = cfg.data;
  if (d.format == "text" || d.format == "tokens") return load_lm_datasets(cfg, use);
  DataSets out;
  const int n_classes = int(d.n_classes);
  if (d.format == "idx") {
    out.train = load_idx_dataset(d.train_images, d.train_labels, n_classes);
    if (!d.eval_images.empty())
      out.eval = load_idx_dataset(d.eval_images, d.eval_labels, n_classes ? n_classes : out.train.n_classes);
  } else if (d.format == "csv") {
    CsvOptions opt;
    opt.header = d.csv_header;
    opt.target = d.target;
    opt.task = d.task == "regression" ? Task::Regression : Task::Classification;
    opt.n_classes = n_classes;
    Dataset all = load_csv(d.train_csv, opt);
    if (!d.eval_csv.empty()) {
      if (opt.task == Task::Classification && opt.n_classes == 0) opt.n_classes = all.n_classes;
      out.train = std::move(all);
      out.eval = load_csv(d.eval_csv, opt);
    } else if (d.eval_fraction > 0) {
      auto parts = split_dataset(all, d.eval_fraction, uint64_t(cfg.run.seed));
      out.train = std::move(parts.first);
      out.eval = std::move(parts.second);
    } else {
      out.train = std::move(all);
    }
  } else {
    // The synthetic set lives in host memory as FP32 features and targets: refused up front when
    // it cannot fit (it was std::bad_alloc, naming nothing).
    const double bytes = double(d.synthetic.train_samples + d.synthetic.eval_samples) *
                         double(d.synthetic.features + d.synthetic.outputs) * 4.0;
    const size_t avail = host_memory_available();
    if (avail > 0 && bytes > double(avail)) {
      // Named by the larger of the two counts (the one to lower).
      const bool eval_larger = d.synthetic.eval_samples > d.synthetic.train_samples;
      const std::string key = eval_larger ? "data.synthetic.eval_samples" : "data.synthetic.train_samples";
      throw Error(ErrorKind::Config,
                  strcat("config error: ", cfg.origin.count(key) ? cfg.origin.at(key) + ": " : "", key, ": ",
                         d.synthetic.train_samples, " training + ", d.synthetic.eval_samples, " evaluation samples of ",
                         d.synthetic.features, " features and ", d.synthetic.outputs, " outputs need ", format_bytes(bytes),
                         " of host memory; ", format_bytes(double(avail)), " are available; generate fewer samples"));
    }
    SyntheticOptions opt;
    opt.n = size_t(d.synthetic.train_samples);
    opt.features = size_t(d.synthetic.features);
    opt.outputs = size_t(d.synthetic.outputs);
    opt.noise = d.synthetic.noise;
    opt.seed = uint64_t(cfg.run.seed);
    out.train = make_synthetic_regression(opt);
    if (d.synthetic.eval_samples > 0) {
      opt.n = size_t(d.synthetic.eval_samples);
      opt.stream = 1;
      out.eval = make_synthetic_regression(opt);
    }
  }
  // Evaluation classes must fit the model's outputs, which come from the training set.
  if (out.eval.n && out.train.task == Task::Classification && out.eval.n_classes > out.train.n_classes)
    throw Error(ErrorKind::Data, strcat("data error: ", out.eval.source, ": has ", out.eval.n_classes,
                                        " classes but the training set ", out.train.source, " has ",
                                        out.train.n_classes, " (set data.n_classes)"));
  if (out.eval.n && out.eval.n_features != out.train.n_features)
    throw Error(ErrorKind::Data, strcat("data error: ", out.eval.source, ": ", out.eval.n_features,
                                        " features per sample, but the training set has ", out.train.n_features));
  const Normalization mode = d.normalize == "global"        ? Normalization::Global
                             : d.normalize == "per_feature" ? Normalization::PerFeature
                                                            : Normalization::None;
  check_finite(out.train, "");
  check_finite(out.eval, "");
  Normalizer norm;
  norm.fit(out.train, mode);
  norm.apply(out.train);
  if (out.eval.n) norm.apply(out.eval);
  check_finite(out.train, " after data.normalize");
  check_finite(out.eval, " after data.normalize");
  return out;
}

uint64_t dataset_digest(const Dataset& d, uint64_t seed) {
  Hasher h(seed);
  const uint64_t shape[4] = {uint64_t(d.n), uint64_t(d.n_features), uint64_t(d.n_classes), uint64_t(d.n_targets)};
  h.update(shape, sizeof shape);
  h.update(d.x.data(), d.x.size() * sizeof(float));
  h.update(d.labels.data(), d.labels.size() * sizeof(int32_t));
  h.update(d.y.data(), d.y.size() * sizeof(float));
  if (d.task == Task::LanguageModel) {
    const uint64_t lm[2] = {uint64_t(d.seq_len), uint64_t(d.vocab)};
    h.update(lm, sizeof lm);
    d.tokens.scan([&](size_t, const int32_t* t, size_t n) { h.update(t, n * sizeof(int32_t)); });
  }
  return h.digest();
}

}  // namespace amp
