// A copy whose destination is written with streaming (non-temporal) stores: no read-for-ownership
// of the destination's lines, which a plain store of a line not in the caches waits for, and the
// lines are not kept in the caches. For results larger than the caches that are not read again
// soon (a linear layer's 16-bit output, read by the next op or by backward): the CPU matmul
// computes such a product's tiles into a buffer the caches keep and copies them out this way
// (backend/cpu/matmul_dnnl.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace amp {

// Rows r < rows of `row_bytes` bytes, from src + r * src_ld to dst + r * dst_ld (lds in bytes):
// in each row plain stores up to dst's first 16-byte boundary and after its last, streaming stores
// between; then a store fence, so that the bytes are visible to other threads when the call
// returns (streaming stores are weakly ordered). Without SSE2, memcpy.
inline void copy_rows_streaming(const void* src, size_t src_ld, void* dst, size_t dst_ld, size_t rows,
                                size_t row_bytes) {
  for (size_t r = 0; r < rows; ++r) {
    const char* s = static_cast<const char*>(src) + r * src_ld;
    char* d = static_cast<char*>(dst) + r * dst_ld;
#if defined(__SSE2__)
    size_t i = (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16;
    if (i > row_bytes) i = row_bytes;
    std::memcpy(d, s, i);
    for (; i + 16 <= row_bytes; i += 16)
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    std::memcpy(d + i, s + i, row_bytes - i);
#else
    std::memcpy(d, s, row_bytes);
#endif
  }
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace amp
