// Train/eval split of an in-memory data set: split_dataset(), a seeded Fisher-Yates shuffle
// (amp::Rng, identical on every platform and rank) cut at round(fraction * n).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "data/dataset.h"

namespace amp {
namespace {

// The samples `rows` of `all`, keeping its task and shape.
Dataset take_rows(const Dataset& all, const size_t* rows, size_t count, const char* part) {
  Dataset d;
  d.source = strcat(all.source, " [", part, "]");
  d.task = all.task;
  d.n = count;
  d.n_features = all.n_features;
  d.n_classes = all.n_classes;
  d.n_targets = all.n_targets;
  d.x.resize(count * all.n_features);
  for (size_t i = 0; i < count; ++i)
    std::copy_n(all.x.begin() + rows[i] * all.n_features, all.n_features,
                d.x.begin() + i * all.n_features);
  if (all.task == Task::Classification) {
    d.labels.resize(count);
    for (size_t i = 0; i < count; ++i) d.labels[i] = all.labels[rows[i]];
  } else {
    d.y.resize(count * all.n_targets);
    for (size_t i = 0; i < count; ++i)
      std::copy_n(all.y.begin() + rows[i] * all.n_targets, all.n_targets,
                  d.y.begin() + i * all.n_targets);
  }
  return d;
}

}  // namespace

std::pair<Dataset, Dataset> split_dataset(const Dataset& all, double eval_fraction,
                                          uint64_t seed) {
  AMP_CHECK(all.x.size() == all.n * all.n_features, "inconsistent data set ", all.source);
  AMP_CHECK(all.task == Task::Classification ? all.labels.size() == all.n
                                             : all.y.size() == all.n * all.n_targets,
            "inconsistent targets in ", all.source);
  if (!(eval_fraction > 0.0 && eval_fraction < 1.0))
    throw Error(ErrorKind::Data, strcat("data error: ", all.source, ": eval fraction ",
                                        eval_fraction, " is not in (0, 1)"));
  const size_t n_eval = static_cast<size_t>(std::llround(eval_fraction * double(all.n)));
  if (n_eval == 0 || n_eval >= all.n)
    throw Error(ErrorKind::Data,
                strcat("data error: ", all.source, ": an eval fraction of ", eval_fraction,
                       " of ", all.n, " samples leaves the ", n_eval == 0 ? "eval" : "train",
                       " part empty"));
  std::vector<size_t> order(all.n);
  std::iota(order.begin(), order.end(), size_t(0));
  Rng rng(seed);
  rng.shuffle(order);
  Dataset eval = take_rows(all, order.data(), n_eval, "eval");
  Dataset train = take_rows(all, order.data() + n_eval, all.n - n_eval, "train");
  return {std::move(train), std::move(eval)};
}

}  // namespace amp
