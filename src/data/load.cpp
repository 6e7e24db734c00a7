#include "data/load.h"

#include <cmath>

#include "core/error.h"
#include "core/hash.h"

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

}  // namespace

DataSets load_datasets(const Config& cfg) {
  const auto& d = cfg.data;
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
  return h.digest();
}

}  // namespace amp
