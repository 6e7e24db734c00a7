// 64-bit non-cryptographic digests: of parameters (desync checks, params_hash), of the resolved
// config (ranks compare it) and of checkpoint payloads. Deterministic across platforms.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace amp {

// Streaming digest: four independent multiply-rotate lanes over 32-byte blocks, then a finalizer.
class Hasher {
 public:
  explicit Hasher(uint64_t seed = 0);
  void update(const void* data, size_t bytes);
  uint64_t digest() const;

 private:
  void block(const unsigned char* p);
  uint64_t lanes_[4];
  unsigned char tail_[32];
  size_t tail_len_ = 0;
  uint64_t total_ = 0;
};

uint64_t hash64(const void* data, size_t bytes, uint64_t seed = 0);
inline uint64_t hash64(const std::string& s, uint64_t seed = 0) { return hash64(s.data(), s.size(), seed); }
std::string hex64(uint64_t h);  // 16 lower-case hex digits

}  // namespace amp
