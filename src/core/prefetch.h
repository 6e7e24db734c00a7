// Software prefetch hints for the CPU kernels' loops. On the 2-core AVX-512 Xeon VMs the hardware's
// prefetchers keep a plain copy fed but leave loops with more work per cache line waiting on L3 or
// memory (bench/bench_stream, operands out of L2): the GELU backward over 2048 x 1536 FP32
// elements took 5.4 ms, 3.1 ms asking for its lines 2 KiB ahead (memcpy of the same bytes:
// 2.5 ms); the overflow check with the gradient norm over 10.8M BF16 elements 6.5 ms, 2.7 ms
// (docs/benchmarks.md). Hints only: nothing is read, and a line past the end of an array is never
// touched, so the loops may ask beyond their data.
#pragma once

#include <cstdint>

namespace amp {

// How far ahead a streaming loop asks for its input.
constexpr int64_t kPrefetchBytes = 2048;

// The cache line kPrefetchBytes after p.
inline void prefetch_ahead(const void* p) { __builtin_prefetch(static_cast<const char*>(p) + kPrefetchBytes); }

// The cache lines of `bytes` bytes from p.
inline void prefetch_row(const void* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes + 63; o += 64) __builtin_prefetch(static_cast<const char*>(p) + o);
}

}  // namespace amp
