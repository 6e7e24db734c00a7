// Deterministic random numbers: the same seed gives the same stream on every platform and rank
// (the standard library's distributions are not portable, so none is used). xoshiro256** seeded
// through splitmix64; state is four words, so it can be saved in a checkpoint.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace amp {

inline uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Mix several values into one seed (seed, epoch, purpose, ...).
inline uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c = 0) {
  uint64_t s = a;
  uint64_t h = splitmix64(s);
  s = h ^ b;
  h = splitmix64(s);
  s = h ^ c;
  return splitmix64(s);
}

class Rng {
 public:
  explicit Rng(uint64_t seed = 1) { reseed(seed); }
  void reseed(uint64_t seed) {
    uint64_t x = seed;
    for (auto& w : s_) w = splitmix64(x);
    has_spare_ = false;
  }

  uint64_t next_u64() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

  // Uniform integer in [0, n), unbiased (Lemire's multiply-and-reject).
  uint64_t below(uint64_t n) {
    if (n <= 1) return 0;
    unsigned __int128 m = static_cast<unsigned __int128>(next_u64()) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(next_u64()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  // Standard normal (Box-Muller, the spare value is kept).
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = box_muller_u1(), u2 = uniform();
    double c;
    box_muller(u1, u2, &c, &spare_);
    has_spare_ = true;
    return c;
  }

  // out[i] = float(scale * normal()) for i < n: the same values, and the same state after, with the
  // Box-Muller transforms (16 ns a value here, the draws 1 ns) spread over the OpenMP threads. A
  // GPT-2 124M's initial weights take 2 s on one thread.
  void fill_normal(float* out, size_t n, double scale);

  template <typename T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(i)]);
  }

  // State for checkpoints.
  struct State {
    uint64_t s[4];
    double spare;
    bool has_spare;
  };
  State state() const { return State{{s_[0], s_[1], s_[2], s_[3]}, spare_, has_spare_}; }
  void set_state(const State& st) {
    for (int i = 0; i < 4; ++i) s_[i] = st.s[i];
    spare_ = st.spare;
    has_spare_ = st.has_spare;
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  // Box-Muller's first uniform, in (0, 1): log(0) has no normal.
  double box_muller_u1() {
    double u1;
    do u1 = uniform(); while (u1 <= 0.0);
    return u1;
  }
  // The two standard normals of the uniforms u1 (in (0, 1)) and u2.
  static void box_muller(double u1, double u2, double* cos_part, double* sin_part) {
    const double r = std::sqrt(-2.0 * std::log(u1));
    *sin_part = r * std::sin(2.0 * M_PI * u2);
    *cos_part = r * std::cos(2.0 * M_PI * u2);
  }
  uint64_t s_[4];
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace amp
