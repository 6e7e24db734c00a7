// Rng::fill_normal against the value-by-value specification (normal()), bit for bit, on 1 and 2
// threads: across block edges, odd counts (the spare kept), and a spare left by an earlier call.
#include <catch2/catch.hpp>

#include <omp.h>

#include <cstring>
#include <vector>

#include "core/rng.h"

namespace {

bool same_state(const amp::Rng& a, const amp::Rng& b) {
  const amp::Rng::State x = a.state(), y = b.state();
  return std::memcmp(x.s, y.s, sizeof x.s) == 0 && x.has_spare == y.has_spare &&
         (!x.has_spare || std::memcmp(&x.spare, &y.spare, sizeof x.spare) == 0);
}

}  // namespace

TEST_CASE("rng: fill_normal gives normal()'s values and state, on any thread count", "[rng]") {
  const int threads_before = omp_get_max_threads();
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (size_t n : {size_t(0), size_t(1), size_t(2), size_t(3), size_t(4095), size_t(4096), size_t(65536),
                     size_t(65537), size_t(200001)}) {
      for (bool spare_first : {false, true}) {
        INFO(threads << " thread(s), n " << n << (spare_first ? ", after an odd draw" : ""));
        amp::Rng spec(0xC0FFEE + n), fast(0xC0FFEE + n);
        if (spare_first) {  // one value drawn: the other of its pair waits as the spare
          spec.normal();
          fast.normal();
        }
        const double scale = 0.02;
        std::vector<float> want(n), got(n, -1.0f);
        for (auto& v : want) v = float(scale * spec.normal());
        fast.fill_normal(got.data(), n, scale);
        CHECK((n == 0 || std::memcmp(want.data(), got.data(), n * sizeof(float)) == 0));  // data() may be null at 0
        CHECK(same_state(spec, fast));
        CHECK(spec.normal() == fast.normal());  // and the streams go on alike
      }
    }
  }
  omp_set_num_threads(threads_before);
}
