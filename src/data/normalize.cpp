// Feature normalization: Normalizer::fit() computes mean and 1/std on the training set (in
// double, since a float sum over 47M pixels loses digits), apply() maps x to (x - mean) / std.
#include <cmath>
#include <vector>

#include "core/error.h"
#include "data/dataset.h"

namespace amp {
namespace {

// 1/std, or 1 for a constant feature: it is only centred, never divided by zero.
float inverse_std(double var) { return var > 0.0 ? static_cast<float>(1.0 / std::sqrt(var)) : 1.0f; }

}  // namespace

void Normalizer::fit(const Dataset& train, Normalization m) {
  AMP_CHECK(train.x.size() == train.n * train.n_features, "inconsistent data set ", train.source);
  mode = m;
  n_features = train.n_features;
  mean.clear();
  inv_std.clear();
  if (m == Normalization::None) return;
  if (train.n == 0 || train.n_features == 0)
    throw Error(ErrorKind::Data, strcat("data error: ", train.source,
                                        ": cannot fit a normalization on an empty data set"));
  const size_t nf = train.n_features;
  const float* x = train.x.data();
  // Two passes (mean, then squared deviations): the one-pass formula cancels badly when the
  // mean is large compared with the spread.
  if (m == Normalization::Global) {
    const size_t total = train.x.size();
    double sum = 0.0;
    for (size_t i = 0; i < total; ++i) sum += x[i];
    const double mu = sum / double(total);
    double sq = 0.0;
    for (size_t i = 0; i < total; ++i) sq += (x[i] - mu) * (x[i] - mu);
    mean.assign(1, static_cast<float>(mu));
    inv_std.assign(1, inverse_std(sq / double(total)));
    return;
  }
  std::vector<double> sum(nf, 0.0), sq(nf, 0.0);
  for (size_t i = 0; i < train.n; ++i)
    for (size_t j = 0; j < nf; ++j) sum[j] += x[i * nf + j];
  for (double& s : sum) s /= double(train.n);
  for (size_t i = 0; i < train.n; ++i)
    for (size_t j = 0; j < nf; ++j) {
      const double dev = x[i * nf + j] - sum[j];
      sq[j] += dev * dev;
    }
  mean.resize(nf);
  inv_std.resize(nf);
  for (size_t j = 0; j < nf; ++j) {
    mean[j] = static_cast<float>(sum[j]);
    inv_std[j] = inverse_std(sq[j] / double(train.n));
  }
}

void Normalizer::apply(Dataset& d) const {
  if (mode == Normalization::None) return;
  AMP_CHECK(d.n_features == n_features, "normalizer fitted on ", n_features,
            " features applied to ", d.source, " with ", d.n_features);
  AMP_CHECK(d.x.size() == d.n * d.n_features, "inconsistent data set ", d.source);
  const size_t nf = d.n_features;
  if (mode == Normalization::Global) {
    AMP_CHECK(mean.size() == 1 && inv_std.size() == 1, "global normalizer not fitted");
    const float mu = mean[0], s = inv_std[0];
    for (float& v : d.x) v = (v - mu) * s;
    return;
  }
  AMP_CHECK(mean.size() == nf && inv_std.size() == nf, "per-feature normalizer not fitted");
  for (size_t i = 0; i < d.n; ++i) {
    float* row = d.x.data() + i * nf;
    for (size_t j = 0; j < nf; ++j) row[j] = (row[j] - mean[j]) * inv_std[j];
  }
}

}  // namespace amp
