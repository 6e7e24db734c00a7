// The seed lecture's synthetic regression: make_synthetic_regression(). W and b depend only on
// the seed, x and the noise on (seed, stream), so train and eval share the model but not samples.
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "data/dataset.h"

namespace amp {

Dataset make_synthetic_regression(const SyntheticOptions& opt) {
  if (opt.n == 0 || opt.features == 0 || opt.outputs == 0)
    throw Error(ErrorKind::Data, strcat("data error: synthetic: n (", opt.n, "), features (",
                                        opt.features, ") and outputs (", opt.outputs,
                                        ") must all be > 0"));
  if (!(opt.noise >= 0.0) || !std::isfinite(opt.noise))
    throw Error(ErrorKind::Data,
                strcat("data error: synthetic: noise must be finite and >= 0, got ", opt.noise));

  // W ~ N(0, 1/features) keeps Var(W x) ~ 1 whatever the width, so the noise level means the
  // same thing for every shape.
  Rng model_rng(mix_seed(opt.seed, 0x5EED));
  const double scale = 1.0 / std::sqrt(double(opt.features));
  std::vector<double> w(opt.outputs * opt.features), b(opt.outputs);
  for (double& v : w) v = scale * model_rng.normal();
  for (double& v : b) v = scale * model_rng.normal();

  Dataset d;
  d.source = "synthetic";
  d.task = Task::Regression;
  d.n = opt.n;
  d.n_features = opt.features;
  d.n_targets = opt.outputs;
  d.x.resize(opt.n * opt.features);
  d.y.resize(opt.n * opt.outputs);
  Rng sample_rng(mix_seed(opt.seed, 1 + opt.stream));
  std::vector<double> x(opt.features);
  for (size_t i = 0; i < opt.n; ++i) {
    for (size_t j = 0; j < opt.features; ++j) {
      // y is computed from the stored (float) x, so it is exactly linear in the data.
      const float xf = static_cast<float>(sample_rng.normal());
      d.x[i * opt.features + j] = xf;
      x[j] = xf;
    }
    for (size_t o = 0; o < opt.outputs; ++o) {
      double acc = b[o];
      for (size_t j = 0; j < opt.features; ++j) acc += w[o * opt.features + j] * x[j];
      acc += opt.noise * sample_rng.normal();
      d.y[i * opt.outputs + o] = static_cast<float>(acc);
    }
  }
  return d;
}

}  // namespace amp
