#include "core/hash.h"

#include <cstdio>
#include <cstring>

namespace amp {
namespace {
constexpr uint64_t kP1 = 0x9e3779b185ebca87ull;
constexpr uint64_t kP2 = 0xc2b2ae3d27d4eb4full;
constexpr uint64_t kP3 = 0x165667b19e3779f9ull;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian hosts only (x86-64, the only target)
}
inline uint64_t round(uint64_t acc, uint64_t in) { return rotl(acc + in * kP2, 31) * kP1; }
inline uint64_t avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}
}  // namespace

Hasher::Hasher(uint64_t seed) {
  lanes_[0] = seed + kP1 + kP2;
  lanes_[1] = seed + kP2;
  lanes_[2] = seed;
  lanes_[3] = seed - kP1;
}

void Hasher::block(const unsigned char* p) {
  for (int i = 0; i < 4; ++i) lanes_[i] = round(lanes_[i], load64(p + 8 * i));
}

void Hasher::update(const void* data, size_t bytes) {
  if (bytes == 0) return;  // data may be null then (an empty vector's data())
  const unsigned char* p = static_cast<const unsigned char*>(data);
  total_ += bytes;
  if (tail_len_) {
    const size_t take = bytes < 32 - tail_len_ ? bytes : 32 - tail_len_;
    std::memcpy(tail_ + tail_len_, p, take);
    tail_len_ += take;
    p += take;
    bytes -= take;
    if (tail_len_ < 32) return;
    block(tail_);
    tail_len_ = 0;
  }
  while (bytes >= 32) {
    block(p);
    p += 32;
    bytes -= 32;
  }
  std::memcpy(tail_, p, bytes);
  tail_len_ = bytes;
}

uint64_t Hasher::digest() const {
  uint64_t h = rotl(lanes_[0], 1) + rotl(lanes_[1], 7) + rotl(lanes_[2], 12) + rotl(lanes_[3], 18);
  h ^= total_ * kP3;
  for (size_t i = 0; i < tail_len_; ++i) h = rotl(h ^ (tail_[i] * kP1), 11) * kP2;
  return avalanche(h);
}

uint64_t hash64(const void* data, size_t bytes, uint64_t seed) {
  Hasher h(seed);
  h.update(data, bytes);
  return h.digest();
}

std::string hex64(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace amp
