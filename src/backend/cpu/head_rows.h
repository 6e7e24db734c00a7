// One attention head's rows of a [B*T, ld] tensor (the qkv projection's output, the attention's
// output and its gradient), copied to or from a thread's dense rows: shared by the fused
// attention's two CPU paths (ops_attention.cpp, ops_attention_matmul.cpp).
#pragma once

#include <cstdint>
#include <cstring>

#include "core/prefetch.h"

namespace amp::cpu {

// The head's rows are short (D elements) and far apart (3 * H * D), so the hardware's prefetchers
// bring in little ahead of the copy loops, which then wait on every row: the loops ask for the row
// this many rows ahead (3-6% off the op at T = 256, docs/benchmarks.md).
constexpr int64_t kPrefetchRows = 8;

// One row of `bytes` bytes: a head of 64 16-bit values (128 bytes, the GPTs' head size) as
// fixed-size copies the compiler inlines as vector moves; other sizes through memcpy.
inline void copy_row_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes == 128) {
    __builtin_memcpy(dst, src, 64);
    __builtin_memcpy(static_cast<char*>(dst) + 64, static_cast<const char*>(src) + 64, 64);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

// Rows t = 0 .. T-1 of sequence b's D 16-bit columns at element offset `col` of a [B*T, ld] tensor
// into dst, rows dst_ld apart.
inline void copy_head_rows16(const void* src, int64_t ld, int64_t b, int64_t col, int64_t T, int64_t D, uint16_t* dst,
                             int64_t dst_ld) {
  const uint16_t* x = static_cast<const uint16_t*>(src) + b * T * ld + col;
  for (int64_t t = 0; t < T; ++t) {
    if (t + kPrefetchRows < T) prefetch_row(x + (t + kPrefetchRows) * ld, D * 2);
    copy_row_bytes(dst + t * dst_ld, x + t * ld, size_t(D) * 2);
  }
}

// The inverse: rows 0 .. rows-1 of src (src_ld apart, D 16-bit values each) into rows row0 ..
// of dst's D columns at `col` ([*, ld]), asking for the destination's rows ahead as the copy
// above asks for its sources (a row's store otherwise waits to read its lines first).
inline void put_head_rows16(const uint16_t* src, int64_t src_ld, int64_t rows, int64_t D, void* dst, int64_t ld,
                            int64_t row0, int64_t col) {
  uint16_t* y = static_cast<uint16_t*>(dst) + row0 * ld + col;
  for (int64_t t = 0; t < rows; ++t) {
    if (t + kPrefetchRows < rows) prefetch_row(y + (t + kPrefetchRows) * ld, D * 2);
    copy_row_bytes(y + t * ld, src + t * src_ld, size_t(D) * 2);
  }
}

}  // namespace amp::cpu
