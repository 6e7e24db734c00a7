// Matrix products on the CPU through oneDNN's matmul primitive (the library PyTorch's CPU path
// uses): f32 or bf16 operands, FP32 accumulation, optional bias added before the one rounding.
// Primitives are created once per shape and kept.
//
// Threads: the bits of C never depend on the thread count (unit test "linear layers: the same
// bits at 1, 2 and 3 threads"); tiles() says how a product is spread.
// - brgemm kernels (AVX-512 CPUs), A B or A B^T: C is cut into tiles of about 256 rows x 1024
//   columns chosen by the product's shape alone, each a single-threaded product, the tiles shared
//   out among the threads (1 included). One slice of rows per thread, as before, gave other bits
//   on AMX CPUs than the whole product (brgemm orders a dot over K by the rows it is given: 64 x
//   3072 x 768 in BF16 differed in 4 elements between 1 and 2 threads), and oneDNN's own threading
//   of one product ran 1.10-1.25x slower at 2 threads than halves side by side.
// - brgemm, A^T B (the weight gradients): oneDNN threads it by cutting the sum over K on AMX CPUs
//   (1 and 2 threads differed in 47 of 442,368 elements of a 1152 x 384 x 2048 BF16 product), and
//   a slice of A^T's rows or of B's columns is a strided operand it leaves brgemm for. So the sum
//   over K is cut here, by the shape alone: chunks of kKChunk rows of A and B, each a
//   single-threaded A^T B product into FP32 (on AMX, and in FP32 with a wide B, in parts added
//   to it by the product: k_part), run side by side (a wave of as many as there are threads),
//   and added in chunk order (((P0 + P1) + P2) + ...), the bias after them, rounded once to C's
//   dtype. The same additions in the same order at any thread count.
// - Strided operands (one head's columns of qkv, a tile of C narrower than C): oneDNN 2.6 runs
//   them on its jit GEMM only, 2-3x slower than brgemm on AMX. Where the dense shape has brgemm, a
//   product of more than kFewRows rows is copied: its strided A, B and C go through dense buffers
//   of the worker's (exact copies), and it runs as the dense product, with its bits. A^T B
//   products (measured no faster copied) and products of a few rows (bound by the read of B,
//   which a copy doubles) keep the jit GEMM; implementation() says "(dense copies)".
// - BF16 products on brgemm whose row tiles all read the whole of B (one column of tiles, B of at
//   most kSharedBMax elements): B is reordered once per call into the layout the tiles'
//   primitives want, and every tile runs on that copy; brgemm would copy a plain B into the same
//   layout inside each tile's product (the same bits; the char shape's BF16 linear_forward and
//   linear_backward_input about 5% faster in the step on AMX, docs/benchmarks.md).
//   implementation() says "(B reordered once for its row tiles)".
// - A 16-bit C of at least kStreamCBytes (one product, not A^T B): each tile is computed into its
//   worker's buffer and copied out with streaming stores (streams_c), the same primitive on the
//   same shape, so the same bits; implementation() says "(C streamed out)".
// - jit GEMM (AVX2-only CPUs, and the strided products above that are not copied): it orders an
//   element's sum over K by the shape it is given, and threaded by itself cuts K for some shapes,
//   so C is cut into tiles chosen by the product's shape alone, each tile a single-threaded
//   product, whatever the thread count (1 included).
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "core/dtype.h"

namespace amp::cpu {

struct MatmulShape {
  size_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;  // A stored K x M / B stored N x K (row-major)
  size_t lda = 0, ldb = 0, ldc = 0;  // stored row strides in elements; 0: dense
  DType ab = DType::F32, c = DType::F32, bias = DType::F32;
  bool has_bias = false;
  bool accumulate = false;  // C += op(A) op(B) (oneDNN's sum post-op): FP32 C, no bias; run_k_chunks' parts
  size_t a_stride() const { return lda ? lda : trans_a ? m : k; }
  size_t b_stride() const { return ldb ? ldb : trans_b ? k : n; }
  size_t c_stride() const { return ldc ? ldc : n; }
  auto key() const {
    return std::make_tuple(m, n, k, trans_a, trans_b, a_stride(), b_stride(), c_stride(), int(ab), int(c), int(bias), has_bias,
                           accumulate);
  }
};

// How run() cuts a product: a grid of rows x cols tiles of C (at least 1 x 1), each a
// single-threaded product, the tiles shared out among the threads. Tile (i, j) is rows
// [row(i), row(i + 1)) and columns [col(j), col(j + 1)) of C, whole blocks of kRowBlock x kColBlock
// but at the edges.
struct MatmulTiles {
  int rows = 0, cols = 0;
  size_t m = 0, n = 0;
  static constexpr size_t kRowBlock = 32, kColBlock = 16;
  int count() const { return rows * cols; }
  size_t row(int i) const { return edge(m, kRowBlock, rows, i); }
  size_t col(int j) const { return edge(n, kColBlock, cols, j); }
  static size_t edge(size_t extent, size_t block, int parts, int i) {
    const size_t blocks = (extent + block - 1) / block, at = blocks * size_t(i) / size_t(parts) * block;
    return at < extent ? at : extent;
  }
};

class DnnlMatmul {
 public:
  DnnlMatmul();
  ~DnnlMatmul();
  // C[m,n] = op(A)[m,k] * op(B)[k,n] (+ bias[n]); all row-major. One caller at a time (the slices'
  // streams and scratchpads are the object's; CpuOps holds its lock); inside a parallel region the
  // tiles run one after another on the calling thread.
  void run(const MatmulShape& s, const void* a, const void* b, const void* bias, void* c);
  // `count` products of shape s, matrix i at a + i * stride_a, b + i * stride_b, c + i * stride_c
  // (elements; a stride of 0 repeats the matrix), run side by side, each single-threaded.
  struct Batch {
    size_t count = 1, stride_a = 0, stride_b = 0, stride_c = 0;
  };
  void run_batch(const MatmulShape& s, const Batch& batch, const void* a, const void* b, const void* bias, void* c);
  // For callers that run products in their own parallel region (the fused attention's matmul path):
  // reserve_slots(n) once outside it, then run_on(slot, ...) runs one whole product of shape s
  // single-threaded on that slot's stream and scratchpad (the calling thread must have called
  // omp_set_num_threads(1), which plans it for one thread). Distinct slots may run at once.
  void reserve_slots(int n);
  void run_on(int slot, const MatmulShape& s, const void* a, const void* b, void* c);
  // The tiles run() cuts a product into: by its shape alone, the same at any thread count.
  MatmulTiles tiles(const MatmulShape& s);
  // Implementation oneDNN chose for a shape (e.g. "brg:avx512_core_bf16"), for benchmarks.
  std::string implementation(const MatmulShape& s);

  // Whether a product's 16-bit C (one product, not A^T B) of at least kStreamCBytes is
  // written with streaming stores: each tile computed into its worker's buffer, which the caches
  // keep from tile to tile, and copied out without reading C's lines first. A product writing
  // straight into a C that is in no cache waits for every line's read: the char shape's BF16
  // qkv and fc products ran 1.1-1.3x slower with C cold than warm (docs/benchmarks.md). FP32 C
  // is left as it was: its products, 5x slower per FLOP, gained nothing measurable.
  static constexpr size_t kStreamCBytes = size_t(4) << 20;
  bool streams_c(const MatmulShape& s);

 private:
  static constexpr double kWholeFlops = double(1 << 22);  // below: a few microseconds, not cut
  // oneDNN's jit GEMM: tiles of about kJitTile x kJitTile, at least four (a multiple of four) for
  // products of kJitSpread FLOPs or more (a millisecond or two on one core); chosen by
  // bench_gpt_step under ONEDNN_MAX_CPU_ISA=AVX2 (docs/benchmarks.md).
  static constexpr size_t kJitTile = 1024;
  static constexpr double kJitSpread = 1e8;
  // brgemm (AVX-512 CPUs): tiles of about kBrgTileRows x kBrgTileCols (whole rows of C up to
  // 2 kBrgTileCols columns), by the product's shape alone.
  static constexpr size_t kBrgTileRows = 256, kBrgTileCols = 1024;
  // A product of at most kFewRows rows (sampling's one position a token) costs the read of B, not
  // its FLOPs: when B holds kFewRowsBytes or more, C's columns are cut into tiles of about
  // kFewRowsCols (at most kFewRowsTiles tiles), so that every thread reads a share of B.
  static constexpr size_t kFewRows = 16, kFewRowsCols = 128, kFewRowsBytes = size_t(1) << 18;
  static constexpr int kFewRowsTiles = 32;
  // brgemm's A^T B: rows of K per chunk. Held while a product runs, and kept for the next: one
  // M x N FP32 block per thread, and one more for the running sum when there are more chunks
  // than threads (GPT-2's LM head at 16 x 1024 tokens, 2 threads: 3 x 154 MB).
  static constexpr size_t kKChunk = 1024;
  // A chunk's product runs as parts of rows, each after the first added to the chunk's FP32 sum by
  // the product itself (oneDNN's sum post-op), in part order (k_part: docs/benchmarks.md):
  // - on AMX, parts of kKPartAmx rows: 1.3-1.5x faster than one 1024-row product at the GPT
  //   shapes' weight gradients;
  // - FP32 on brgemm where a chunk of B holds more than kKPartWideB bytes (streamed again for
  //   every block of C) and C at most kKPartMaxC elements: parts of kKPartF32 rows, halved (down
  //   to kKPartF32Min) while a part of B holds more than kKPartBytes (an L2 cache of the CPU
  //   measured). GPT-2's mlp.proj weight gradient (768 x 3072, K 2048) ran 2.1x faster in parts
  //   of 128; narrower B (the other GPT shapes) gained nothing at 1 thread and lost 7-9% at 2;
  // - otherwise whole (BF16 on AVX-512-BF16 brgemm without AMX: no faster in parts).
  static constexpr size_t kKPartAmx = 512, kKPartF32 = 256, kKPartF32Min = 64;
  static constexpr size_t kKPartBytes = size_t(2) << 20, kKPartWideB = size_t(8) << 20, kKPartMaxC = size_t(1) << 22;
  bool k_chunked(const MatmulShape& s);
  // Whether the row tiles of a product share one reordered B (at most kSharedBMax elements: 8 MiB
  // of BF16, every linear layer of GPT-2 124M).
  static constexpr size_t kSharedBMax = size_t(1) << 22;
  bool shares_b(const MatmulShape& s, const MatmulTiles& t);
  size_t k_part(const MatmulShape& chunk);  // the rows of one part of a chunk of this shape
  void run_k_chunks(const MatmulShape& s, int threads, const void* a, const void* b, const void* bias, void* c);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace amp::cpu
