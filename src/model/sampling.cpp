#include "model/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace amp {

int32_t sample_token(const std::vector<float>& logits, double temperature, size_t top_k, double top_p, double u) {
  AMP_CHECK(!logits.empty() && temperature > 0, "sample_token: no logits or temperature <= 0");
  AMP_CHECK(top_p > 0 && top_p <= 1, "sample_token: top_p ", top_p, " outside (0, 1]");
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t k = top_k == 0 || top_k > logits.size() ? logits.size() : top_k;
  std::partial_sort(order.begin(), order.begin() + long(k), order.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  const double top = double(logits[size_t(order[0])]);
  std::vector<double> p(k);
  double sum = 0;
  for (size_t i = 0; i < k; ++i) {
    const double z = (double(logits[size_t(order[i])]) - top) / temperature;
    p[i] = std::isfinite(z) ? std::exp(z) : 0.0;
    sum += p[i];
  }
  size_t m = k;  // the nucleus: the first m tokens' probabilities reach top_p
  if (top_p < 1) {
    double cum = 0, kept = 0;
    for (m = 0; m < k && (m == 0 || cum < top_p); ++m) cum += p[m] / sum, kept += p[m];
    sum = kept;
  }
  double acc = 0;
  for (size_t i = 0; i < m; ++i) {
    acc += p[i] / sum;
    if (u < acc) return order[i];
  }
  return order[m - 1];
}

std::vector<int32_t> generate(const std::vector<int32_t>& prompt, const SampleOptions& opt,
                              const std::function<std::vector<float>(const std::vector<int32_t>&)>& next_logits,
                              const std::function<bool()>& stop) {
  std::vector<int32_t> out = prompt;
  Rng rng(mix_seed(opt.seed, 0x5A3Bull, 0));
  for (size_t i = 0; i < opt.tokens && !(stop && stop()); ++i)
    out.push_back(sample_token(next_logits(out), opt.temperature, opt.top_k, opt.top_p, rng.uniform(0.0, 1.0)));
  return out;
}

}  // namespace amp
