// Rng::fill_normal: the uniforms are drawn in order on one thread (their order is the stream's),
// then turned into normals on all of them, a block at a time.
#include "core/rng.h"

#include <algorithm>
#include <vector>

namespace amp {

void Rng::fill_normal(float* out, size_t n, double scale) {
  size_t i = 0;
  if (n > 0 && has_spare_) {
    out[i++] = float(scale * spare_);
    has_spare_ = false;
  }
  constexpr size_t kBlockPairs = size_t(1) << 15;
  std::vector<double> u;
  while (i < n) {
    const size_t values = std::min(n - i, 2 * kBlockPairs), pairs = (values + 1) / 2;
    u.resize(2 * pairs);
    for (size_t k = 0; k < pairs; ++k) {
      u[2 * k] = box_muller_u1();
      u[2 * k + 1] = uniform();
    }
    float* o = out + i;
    const int64_t whole = int64_t(values / 2);  // pairs whose both values are written
#pragma omp parallel for schedule(static) if (whole >= 2048)
    for (int64_t k = 0; k < whole; ++k) {
      double c, s;
      box_muller(u[2 * k], u[2 * k + 1], &c, &s);
      o[2 * k] = float(scale * c);
      o[2 * k + 1] = float(scale * s);
    }
    if (values % 2) {  // n's last value: its pair's second is the spare, as after normal()
      double c;
      box_muller(u[2 * pairs - 2], u[2 * pairs - 1], &c, &spare_);
      o[values - 1] = float(scale * c);
      has_spare_ = true;
    }
    i += values;
  }
}

}  // namespace amp
