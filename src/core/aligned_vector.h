// std::vector whose storage starts on a cache line (64 bytes, also an AVX-512 register's width),
// for the CPU kernels' scratch: rows that the vector loops read and write a register at a time.
// With std::allocator, glibc's malloc gives 16-byte alignment (a large block is a page plus its
// 16-byte header), so every 64-byte load of such a row spans two cache lines: the fused
// attention's tile kernels ran 8-15% slower on 16-byte-aligned scratch than on the same buffers
// 64-byte aligned (docs/benchmarks.md).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <limits>
#include <new>
#include <vector>

namespace amp {

constexpr size_t kCacheLine = 64;

template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}

  T* allocate(size_t n) {
    if (n > (std::numeric_limits<size_t>::max() - kCacheLine) / sizeof(T)) throw std::bad_array_new_length();
    // aligned_alloc takes a size that is a multiple of the alignment
    const size_t bytes = (n * sizeof(T) + kCacheLine - 1) / kCacheLine * kCacheLine;
    void* p = std::aligned_alloc(kCacheLine, bytes ? bytes : kCacheLine);
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
};

template <typename T, typename U>
bool operator==(const CacheLineAllocator<T>&, const CacheLineAllocator<U>&) { return true; }
template <typename T, typename U>
bool operator!=(const CacheLineAllocator<T>&, const CacheLineAllocator<U>&) { return false; }

template <typename T>
using aligned_vector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace amp
