#include "backend/cpu/matmul_dnnl.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/aligned_vector.h"
#include "core/convert.h"
#include "core/error.h"
#include "core/stream_copy.h"

namespace amp::cpu {

namespace {
using dnnl::memory;

memory::data_type dnnl_type(DType t) {
  switch (t) {
    case DType::F32: return memory::data_type::f32;
    case DType::BF16: return memory::data_type::bf16;
    case DType::F16: return memory::data_type::f16;
    default: throw Error(ErrorKind::Internal, strcat("matmul: unsupported dtype ", dtype_name(t)));
  }
}
// A chunk of run_k_chunks' A^T B (s): every row and column of C, k rows of A and B at s's strides,
// into a dense FP32 block, no bias.
MatmulShape k_chunk_shape(const MatmulShape& s, size_t k) {
  MatmulShape c = s;
  c.k = k;
  c.lda = s.a_stride(), c.ldb = s.b_stride(), c.ldc = s.n;
  c.c = DType::F32, c.has_bias = false;
  return c;
}
}  // namespace

struct DnnlMatmul::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  struct Entry {
    dnnl::matmul prim;
    memory::desc a, b, bias, c;
    memory::desc plain_b;  // B as stored (b itself, but for get_packed's entries)
    dnnl::reorder pack;    // get_packed's entries: plain_b -> b
    size_t scratch_bytes = 0;
    std::string impl;
  };
  // Keyed by the shape and the threads oneDNN plans it for (a slice's primitive is planned for one).
  using Cache = std::map<std::pair<decltype(MatmulShape().key()), int>, Entry>;
  Cache cache, packed_cache;
  aligned_vector<char> shared_b;  // B reordered once for the row tiles that share it (run_batch)
  std::mutex mu;
  // A primitive's arguments on one slot, made once: each run only sets their pointers (creating
  // the memory objects and the map for every product cost as much as a small product's kernel).
  struct Bound {
    std::unordered_map<int, memory> args;
    const char* scratch = nullptr;  // where the scratchpad memory points
  };
  // Per slice: a stream and the scratchpad its primitive uses (slices run at once, so oneDNN's
  // one library scratchpad cannot be shared: the primitives take the user's).
  struct Slot {
    std::unique_ptr<dnnl::stream> stream;
    std::vector<char> scratch;
    aligned_vector<float> partial;  // a K chunk's FP32 product (run_k_chunks)
    // Dense copies of a strided A, B and C (packed products); [2] also holds a tile whose C is
    // streamed out (streams_c).
    aligned_vector<char> dense[3];
    std::map<const void*, Bound> bound;  // by Entry
  };
  aligned_vector<float> k_sum;  // run_k_chunks' running sum
  std::deque<Slot> slots;  // references stay valid as it grows
  static constexpr size_t kAlign = 4096;  // the scratchpads' alignment (a page, as oneDNN's own)

  void ensure_slots(int n) {  // outside the parallel region
    while (int(slots.size()) < n) {
      slots.emplace_back();
      slots.back().stream = std::make_unique<dnnl::stream>(engine);
    }
  }

  // oneDNN 2.6's brgemm matmul takes dense operands only: a product with a strided A, B or C (one
  // head's columns of qkv, a tile of C narrower than C) goes to its jit GEMM, whose short sums run
  // 2x slower than brgemm on AMX (docs/benchmarks.md). Such a product, where its dense shape has
  // brgemm and the copies pay (copies_pay), is packed: its strided operands are copied into the
  // slot's dense buffers (exact, the same dtype), the dense product runs, and C is copied out.
  static MatmulShape dense(MatmulShape s) {
    s.lda = s.ldb = s.ldc = 0;
    return s;
  }
  static bool is_brgemm(const Entry& e) { return e.impl.rfind("brg:", 0) == 0; }
  // Measured on an AMX CPU (docs/benchmarks.md): copies pay where K or N is at most 256, which the
  // jit GEMM runs slowly (the attention's products, one head's 64 columns: QK^T 1.9x, P V 1.2x
  // faster copied), and for products of at least 1024 FLOPs per copied element with K up to 4096
  // (a linear tile's C: 1.2x faster); not for fewer FLOPs per element (a linear tile's B, copied
  // for each row tile: 1.13x slower), nor for long sums, where the jit GEMM is as fast (d(lnf)
  // over GPT-2's vocabulary: 1.10x slower). A^T B (measured no faster) and products of a few rows
  // (bound by the read of B) are not copied.
  static bool copies_pay(const MatmulShape& s, const MatmulShape& d) {
    if (s.trans_a || s.m <= kFewRows) return false;
    if (s.k <= 256 || s.n <= 256) return true;
    const double copied = double(s.a_stride() != d.a_stride() ? s.m * s.k : 0) +
                          double(s.b_stride() != d.b_stride() ? s.k * s.n : 0) +
                          double(s.c_stride() != d.c_stride() ? s.m * s.n : 0);
    return s.k <= 4096 && 2.0 * double(s.m) * double(s.n) * double(s.k) >= 1024.0 * copied;
  }
  bool packs(const MatmulShape& s) {
    if (s.accumulate) return false;  // C's old values are an input: never through a dense copy
    const MatmulShape d = dense(s);
    if (d.key() == s.key() || !copies_pay(s, d) || is_brgemm(get(s))) return false;
    return is_brgemm(get(d));
  }
  // The primitive a product runs on (the dense shape's when it is packed).
  Entry& runs(const MatmulShape& s) { return packs(s) ? get(dense(s)) : get(s); }

  // Whether row tiles of these shapes (a product's tiles differ in their rows only) may share one
  // copy of B in their primitives' own layout: brgemm products on B as stored (not through
  // packs()' dense copies), whose primitives with that layout all want the same one. A layout
  // oneDNN cannot plan leaves the product on its plain B.
  bool tiles_share_b(const std::vector<MatmulShape>& shapes) {
    if (shapes.front().trans_a || shapes.front().accumulate) return false;
    try {
      for (const MatmulShape& t : shapes)
        if (packs(t) || !is_brgemm(get(t)) || !is_brgemm(get_packed(t)) || get_packed(t).b != get_packed(shapes[0]).b)
          return false;
    } catch (const Error&) {
      return false;
    }
    return true;
  }
  // B reordered into shared_b for the tiles of shape `tile` (shares_b held), on slot 0's stream.
  void pack_b(const MatmulShape& tile, const void* b) {
    Entry& e = get_packed(tile);
    shared_b.resize(e.b.get_size());
    memory from(e.plain_b, engine, const_cast<void*>(b)), to(e.b, engine, shared_b.data());
    e.pack.execute(*slots[0].stream, from, to);
    slots[0].stream->wait();
  }

  // Rows of `rows` x `len` elements, `ld` apart, to or from a dense block (ld == len: one copy);
  // with `stream`, written with streaming stores.
  static void copy_rows(const char* src, size_t src_ld, char* dst, size_t dst_ld, size_t rows, size_t len, size_t e,
                        bool stream = false) {
    if (stream) return copy_rows_streaming(src, src_ld * e, dst, dst_ld * e, rows, len * e);
    for (size_t r = 0; r < rows; ++r) std::memcpy(dst + r * dst_ld * e, src + r * src_ld * e, len * e);
  }

  // The product s into c; with stream_c, C's rows are written with streaming stores from a copy
  // in the slot's buffer (the same primitive, so the same bits).
  void execute(int slot, const MatmulShape& s, const void* a, const void* b, const void* bias, void* c,
               bool stream_c = false) {
    Slot& sl = slots[size_t(slot)];
    if (packs(s)) {
      const MatmulShape d = dense(s);
      const size_t ea = dtype_size(s.ab), ec = dtype_size(s.c);
      // A is stored m x k (k x m transposed), B k x n (n x k); a stride equal to the dense one
      // needs no copy.
      const auto pack = [&](const void* src, size_t ld, size_t dense_ld, size_t rows, aligned_vector<char>& buf) {
        if (ld == dense_ld) return src;
        buf.resize(rows * dense_ld * ea);
        copy_rows(static_cast<const char*>(src), ld, buf.data(), dense_ld, rows, dense_ld, ea);
        return static_cast<const void*>(buf.data());
      };
      const void* da = pack(a, s.a_stride(), d.a_stride(), s.trans_a ? s.k : s.m, sl.dense[0]);
      const void* db = pack(b, s.b_stride(), d.b_stride(), s.trans_b ? s.n : s.k, sl.dense[1]);
      if (s.c_stride() == d.c_stride() && !stream_c) {
        run_primitive(sl, get(d), d, da, db, bias, c);
        return;
      }
      sl.dense[2].resize(s.m * s.n * ec);
      run_primitive(sl, get(d), d, da, db, bias, sl.dense[2].data());
      copy_rows(sl.dense[2].data(), s.n, static_cast<char*>(c), s.c_stride(), s.m, s.n, ec, stream_c);
      return;
    }
    run_into(sl, get(s), s, a, b, bias, c, stream_c);
  }

  // run_primitive into c, or with stream_c into the slot's buffer (C's layout) and from there into
  // c with streaming stores.
  void run_into(Slot& sl, Entry& e, const MatmulShape& s, const void* a, const void* b, const void* bias, void* c,
                bool stream_c) {
    if (!stream_c) return run_primitive(sl, e, s, a, b, bias, c);
    const size_t ec = dtype_size(s.c), ld = s.c_stride();
    sl.dense[2].resize(((s.m - 1) * ld + s.n) * ec);
    run_primitive(sl, e, s, a, b, bias, sl.dense[2].data());
    copy_rows(sl.dense[2].data(), ld, static_cast<char*>(c), ld, s.m, s.n, ec, true);
  }

  void run_primitive(Slot& sl, Entry& e, const MatmulShape& s, const void* a, const void* b, const void* bias, void* c) {
    if (sl.scratch.size() < e.scratch_bytes + kAlign) sl.scratch.resize(e.scratch_bytes + kAlign);
    char* scratch = sl.scratch.data() + (kAlign - uintptr_t(sl.scratch.data()) % kAlign) % kAlign;
    Bound& bd = sl.bound[&e];
    if (bd.args.empty()) {
      bd.args.emplace(DNNL_ARG_SRC, memory(e.a, engine, DNNL_MEMORY_NONE));
      bd.args.emplace(DNNL_ARG_WEIGHTS, memory(e.b, engine, DNNL_MEMORY_NONE));
      bd.args.emplace(DNNL_ARG_DST, memory(e.c, engine, DNNL_MEMORY_NONE));
      if (s.has_bias) bd.args.emplace(DNNL_ARG_BIAS, memory(e.bias, engine, DNNL_MEMORY_NONE));
      if (e.scratch_bytes)
        bd.args.emplace(DNNL_ARG_SCRATCHPAD,
                        memory({{memory::dim(e.scratch_bytes)}, memory::data_type::u8, {1}}, engine, DNNL_MEMORY_NONE));
    }
    bd.args.at(DNNL_ARG_SRC).set_data_handle(const_cast<void*>(a));
    bd.args.at(DNNL_ARG_WEIGHTS).set_data_handle(const_cast<void*>(b));
    bd.args.at(DNNL_ARG_DST).set_data_handle(c);
    if (s.has_bias) bd.args.at(DNNL_ARG_BIAS).set_data_handle(const_cast<void*>(bias));
    if (e.scratch_bytes && bd.scratch != scratch) {
      bd.args.at(DNNL_ARG_SCRATCHPAD).set_data_handle(scratch);
      bd.scratch = scratch;
    }
    e.prim.execute(*sl.stream, bd.args);
    sl.stream->wait();
  }

  Entry& get(const MatmulShape& s) { return get_in(cache, s, false); }
  // The same product with B in the primitive's own layout (Entry::b: that layout; plain_b the
  // stored one), for products whose row tiles share one reordered B (run_batch).
  Entry& get_packed(const MatmulShape& s) { return get_in(packed_cache, s, true); }

  Entry& get_in(Cache& in, const MatmulShape& s, bool packed_b) {
    std::lock_guard<std::mutex> lock(mu);
    const auto key = std::make_pair(s.key(), omp_get_max_threads());
    auto it = in.find(key);
    if (it != in.end()) return it->second;
    const auto M = memory::dim(s.m), N = memory::dim(s.n), K = memory::dim(s.k);
    Entry e;
    const auto lda = memory::dim(s.a_stride());
    e.a = memory::desc({M, K}, dnnl_type(s.ab), s.trans_a ? memory::dims{1, lda} : memory::dims{lda, 1});
    const auto ldb = memory::dim(s.b_stride()), ldc = memory::dim(s.c_stride());
    e.plain_b = memory::desc({K, N}, dnnl_type(s.ab), s.trans_b ? memory::dims{1, ldb} : memory::dims{ldb, 1});
    e.b = packed_b ? memory::desc({K, N}, dnnl_type(s.ab), memory::format_tag::any) : e.plain_b;
    e.c = memory::desc({M, N}, dnnl_type(s.c), memory::dims{ldc, 1});
    try {
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      if (s.accumulate) {  // C = A B + C in FP32: the sum post-op adds the old C to the product's sum
        AMP_CHECK(s.c == DType::F32 && !s.has_bias, "matmul: an accumulating product takes an FP32 C and no bias");
        dnnl::post_ops ops;
        ops.append_sum(1.0f);
        attr.set_post_ops(ops);
      }
      if (s.has_bias) e.bias = memory::desc({1, N}, dnnl_type(s.bias), memory::dims{N, 1});
      const dnnl::matmul::desc d = s.has_bias ? dnnl::matmul::desc(e.a, e.b, e.bias, e.c) : dnnl::matmul::desc(e.a, e.b, e.c);
      dnnl::matmul::primitive_desc pd(d, attr, engine);
      e.impl = pd.impl_info_str();
      e.scratch_bytes = pd.scratchpad_desc().get_size();
      e.prim = dnnl::matmul(pd);
      if (packed_b) {
        e.b = pd.weights_desc();
        e.pack = dnnl::reorder(memory(e.plain_b, engine, DNNL_MEMORY_NONE), memory(e.b, engine, DNNL_MEMORY_NONE));
      }
    } catch (const dnnl::error& err) {
      throw Error(ErrorKind::Internal, strcat("oneDNN matmul ", s.m, "x", s.n, "x", s.k, " ", dtype_name(s.ab),
                                              "->", dtype_name(s.c), " is not available: ", err.what()));
    }
    return in.emplace(key, std::move(e)).first->second;
  }
};

DnnlMatmul::DnnlMatmul() : impl_(std::make_unique<Impl>()) {}
DnnlMatmul::~DnnlMatmul() = default;

bool DnnlMatmul::k_chunked(const MatmulShape& s) { return s.trans_a && s.k > 0 && Impl::is_brgemm(impl_->runs(s)); }

// A tile's shape: rows of A (or columns of A^T) and columns of B at the product's strides.
static MatmulShape tile_shape(const MatmulShape& s, const MatmulTiles& t, int i, int j) {
  MatmulShape part = s;
  part.lda = s.a_stride(), part.ldb = s.b_stride(), part.ldc = s.c_stride();
  part.m = t.row(i + 1) - t.row(i);
  part.n = t.col(j + 1) - t.col(j);
  return part;
}

// Measured on BF16 (AMX: the char shape's forward and backward-input products about 5% faster in
// the step, docs/benchmarks.md); FP32 and the batched products keep the plain B, and so does a B
// of more than kSharedBMax elements (the copy is held between calls: a GPT-2 LM head's 77 MB of
// BF16 would double the weights' footprint for a product not measured).
bool DnnlMatmul::shares_b(const MatmulShape& s, const MatmulTiles& t) {
  if (t.cols != 1 || t.rows < 2 || s.ab != DType::BF16 || s.k * s.n > kSharedBMax) return false;
  std::vector<MatmulShape> shapes;  // every tile's shape, each once (their rows take a few values)
  for (int i = 0; i < t.rows; ++i) {
    const MatmulShape part = tile_shape(s, t, i, 0);
    if (std::none_of(shapes.begin(), shapes.end(), [&](const MatmulShape& x) { return x.m == part.m; }))
      shapes.push_back(part);
  }
  return impl_->tiles_share_b(shapes);
}

// On AMX a chunk of 1024 rows ran at 600-720 GFLOP/s as one product and at 740-1030 as two parts of
// 512 (BF16, one thread, the GPT shapes' weight gradients). FP32 brgemm ran GPT-2's 768 x 3072
// weight gradient at 53 GFLOP/s in chunks of 1024 rows (B's chunk, 12 MiB, streamed for every
// block of C) and at 127 in parts of 128; BF16 brgemm without AMX: no faster in parts.
size_t DnnlMatmul::k_part(const MatmulShape& chunk) {
  const Impl::Entry& e = impl_->get(chunk);
  size_t part = chunk.k;
  if (e.impl.find("amx") != std::string::npos) {
    part = kKPartAmx;
  } else if (Impl::is_brgemm(e) && chunk.ab == DType::F32 && chunk.k * chunk.n * sizeof(float) > kKPartWideB &&
             chunk.m * chunk.n <= kKPartMaxC) {
    part = kKPartF32;
    while (part > kKPartF32Min && part * chunk.n * sizeof(float) > kKPartBytes) part /= 2;
  }
  return std::min(part, chunk.k);
}

MatmulTiles DnnlMatmul::tiles(const MatmulShape& s) {
  MatmulTiles t;
  t.m = s.m;
  t.n = s.n;
  const double flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
  if (!s.trans_a && s.m <= kFewRows && s.n * s.k * dtype_size(s.ab) >= kFewRowsBytes) {
    t.rows = 1;
    t.cols = int(std::clamp<size_t>(s.n / kFewRowsCols, 1, kFewRowsTiles));
    return t;
  }
  if (!Impl::is_brgemm(impl_->runs(s))) {
    // oneDNN's jit GEMM (AVX2-only CPUs) threads a product by cutting its sum over K where the
    // shape suits, and blocks K by the product's shape, so its bits would depend on the thread
    // count and on any cut made by it. The tiles here depend on the shape alone: every product
    // runs as the same single-threaded pieces at any thread count.
    t.rows = t.cols = 1;
    if (flops < kWholeFlops) return t;
    t.rows = int(s.m / kJitTile > 0 ? s.m / kJitTile : 1);
    t.cols = int(s.n / kJitTile > 0 ? s.n / kJitTile : 1);
    // At least four tiles, a multiple of four, for a product worth spreading: halve the longer
    // side of the tile while it is at least two blocks long.
    while (flops >= kJitSpread && t.count() % 4 != 0) {
      const size_t tm = s.m / size_t(t.rows), tn = s.n / size_t(t.cols);
      if (tm >= tn && tm >= 2 * MatmulTiles::kRowBlock) t.rows *= 2;
      else if (tn >= 2 * MatmulTiles::kColBlock) t.cols *= 2;
      else break;
    }
    return t;
  }
  // brgemm orders an element's dot over K by the product it is given: on AMX CPUs a slice of the
  // rows gave other bits than the whole (64 x 3072 x 768 BF16: 4 elements differed between the
  // whole and two slices of 32 rows; 1024 rows in three slices too). So, as for the jit GEMM, C is
  // cut by the shape alone: tiles of about kBrgTileRows x kBrgTileCols, each a single-threaded
  // product, at any thread count (1 included). A^T B (the weight gradients; run() cuts their sum
  // over K instead, run_k_chunks) and products of a few microseconds: one tile.
  t.rows = t.cols = 1;
  if (s.trans_a || flops < kWholeFlops) return t;
  t.rows = int(s.m / kBrgTileRows > 0 ? s.m / kBrgTileRows : 1);
  t.cols = int(s.n / kBrgTileCols > 0 ? s.n / kBrgTileCols : 1);
  return t;
}

void DnnlMatmul::reserve_slots(int n) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->ensure_slots(n < 1 ? 1 : n);
}

void DnnlMatmul::run_on(int slot, const MatmulShape& s, const void* a, const void* b, void* c) {
  if (s.m && s.n) impl_->execute(slot, s, a, b, nullptr, c);
}

void DnnlMatmul::run(const MatmulShape& s, const void* a, const void* b, const void* bias, void* c) {
  run_batch(s, Batch{}, a, b, bias, c);
}

void DnnlMatmul::run_batch(const MatmulShape& s, const Batch& batch, const void* a, const void* b, const void* bias,
                           void* c) {
  if (s.m == 0 || s.n == 0 || batch.count == 0) return;
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  // One A^T B product on brgemm: its sum over K cut into chunks (run_k_chunks). Otherwise every
  // product of the batch is cut into the tiles its shape gives (tiles()), and the tiles of all of
  // them are shared out among the threads, each tile a single-threaded product.
  if (batch.count == 1 && k_chunked(s)) {
    run_k_chunks(s, threads, a, b, bias, c);
    return;
  }
  const MatmulTiles t = tiles(s);
  const size_t units = size_t(t.count()) * batch.count;
  const int workers = units < size_t(threads) ? int(units) : threads;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->ensure_slots(workers < 1 ? 1 : workers);
  }
  const size_t ea = dtype_size(s.ab), ec = dtype_size(s.c), eb = dtype_size(s.bias);
  // Row tiles that all read the whole of B: B reordered once, here, and every tile on that copy.
  const bool shared = batch.count == 1 && shares_b(s, t);
  if (shared) impl_->pack_b(tile_shape(s, t, 0, 0), b);
  const bool stream = batch.count == 1 && streams_c(s);
  std::exception_ptr failed;
#pragma omp parallel num_threads(workers)
  {
    const int w = omp_get_thread_num();
    omp_set_num_threads(1);  // this thread's nested regions: oneDNN plans and runs each tile alone
    for (size_t u = size_t(w); u < units; u += size_t(workers)) {
      const size_t item = u / size_t(t.count()), tile = u % size_t(t.count());
      const int i = int(tile) / t.cols, j = int(tile) % t.cols;
      const size_t r0 = t.row(i), c0 = t.col(j);
      const MatmulShape part = tile_shape(s, t, i, j);
      const size_t a_off = item * batch.stride_a + (s.trans_a ? r0 : r0 * part.lda);
      const size_t b_off = item * batch.stride_b + (s.trans_b ? c0 * part.ldb : c0);
      const size_t c_off = item * batch.stride_c + r0 * part.ldc + c0;
      try {
        const char* bias_at = s.has_bias ? static_cast<const char*>(bias) + c0 * eb : static_cast<const char*>(bias);
        if (part.m && part.n && shared)
          impl_->run_into(impl_->slots[size_t(w)], impl_->get_packed(part), part,
                          static_cast<const char*>(a) + a_off * ea, impl_->shared_b.data(), bias_at,
                          static_cast<char*>(c) + c_off * ec, stream);
        else if (part.m && part.n)
          impl_->execute(w, part, static_cast<const char*>(a) + a_off * ea, static_cast<const char*>(b) + b_off * ea,
                         bias_at, static_cast<char*>(c) + c_off * ec, stream);
      } catch (...) {
#pragma omp critical(amp_matmul_failed)
        if (!failed) failed = std::current_exception();
      }
    }
  }
  if (failed) std::rethrow_exception(failed);
}

void DnnlMatmul::run_k_chunks(const MatmulShape& s, int threads, const void* a, const void* b, const void* bias,
                              void* c) {
  const size_t chunks = (s.k + kKChunk - 1) / kKChunk, mn = s.m * s.n, ea = dtype_size(s.ab);
  const int workers = int(chunks < size_t(threads) ? chunks : size_t(threads));
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->ensure_slots(workers < 1 ? 1 : workers);
    for (int w = 0; w < workers; ++w) impl_->slots[size_t(w)].partial.resize(mn);
    impl_->k_sum.resize(chunks > size_t(workers) ? mn : 0);
  }
  // The earlier waves' sum (more waves than one); the first chunk is computed into it.
  const bool waves = chunks > size_t(workers);
  float* sum = impl_->k_sum.data();
  std::exception_ptr failed;
  for (size_t wave = 0; wave < chunks; wave += size_t(workers)) {
    const size_t in_wave = std::min(chunks - wave, size_t(workers));
#pragma omp parallel num_threads(int(in_wave))
    {
      const int w = omp_get_thread_num();
      omp_set_num_threads(1);
      const size_t k0 = (wave + size_t(w)) * kKChunk;
      const MatmulShape p = k_chunk_shape(s, std::min(s.k, k0 + kKChunk) - k0);
      try {  // A stored K x M: rows k0.. of it; B: rows k0.. (K x N) or columns k0.. (N x K)
        // The chunk's parts in order, each after the first added to the sum by the product.
        const size_t step = k_part(p);
        float* into = waves && wave == 0 && w == 0 ? sum : impl_->slots[size_t(w)].partial.data();
        for (size_t k1 = k0; k1 < k0 + p.k; k1 += step) {
          MatmulShape q = p;
          q.k = std::min(k0 + p.k, k1 + step) - k1;
          q.accumulate = k1 > k0;
          impl_->execute(w, q, static_cast<const char*>(a) + k1 * p.lda * ea,
                         static_cast<const char*>(b) + (s.trans_b ? k1 : k1 * p.ldb) * ea, nullptr, into);
        }
      } catch (...) {
#pragma omp critical(amp_matmul_failed)
        if (!failed) failed = std::current_exception();
      }
    }
    if (failed) std::rethrow_exception(failed);
    // The wave's partials in chunk order, after the running sum of the earlier waves.
    std::vector<const float*> terms;
    if (waves) terms.push_back(sum);  // in the first wave, P0
    for (size_t i = waves && wave == 0 ? 1 : 0; i < in_wave; ++i) terms.push_back(impl_->slots[i].partial.data());
    // Before the last wave: sum = ((P0 + P1) + P2) + ..., in FP32. The last wave: C = round(that
    // sum + bias), the one rounding (to nearest even, as oneDNN's).
    const bool last = wave + in_wave == chunks;
    if (!last && terms.size() == 1) continue;  // a first wave of one chunk: the sum is P0
    std::vector<float> bias_f(last && s.has_bias ? s.n : 0);
    if (!bias_f.empty()) convert(bias, s.bias, bias_f.data(), DType::F32, s.n);
    const DType out = last ? s.c : DType::F32;
    const size_t ld = last ? s.c_stride() : s.n, eo = dtype_size(out);
    char* dst = last ? static_cast<char*>(c) : reinterpret_cast<char*>(sum);
#pragma omp parallel for schedule(static) num_threads(threads)
    for (size_t r = 0; r < s.m; ++r) {
      float row[256];
      for (size_t j0 = 0; j0 < s.n; j0 += 256) {
        const size_t nj = std::min<size_t>(256, s.n - j0), e0 = r * s.n + j0;
        for (size_t j = 0; j < nj; ++j) row[j] = terms[0][e0 + j];
        for (size_t t = 1; t < terms.size(); ++t)
          for (size_t j = 0; j < nj; ++j) row[j] += terms[t][e0 + j];
        if (!bias_f.empty())
          for (size_t j = 0; j < nj; ++j) row[j] += bias_f[j0 + j];
        convert(row, DType::F32, dst + (r * ld + j0) * eo, out, nj);
      }
    }
  }
}

bool DnnlMatmul::streams_c(const MatmulShape& s) {
  return (s.c == DType::F16 || s.c == DType::BF16) && !s.accumulate && !s.trans_a &&
         s.m * s.n * dtype_size(s.c) >= kStreamCBytes;
}

std::string DnnlMatmul::implementation(const MatmulShape& s) {
  const std::string streamed = streams_c(s) ? " (C streamed out)" : "";
  if (impl_->packs(s)) return impl_->get(Impl::dense(s)).impl + " (dense copies)" + streamed;
  if (!k_chunked(s) && shares_b(s, tiles(s)))
    return impl_->get(s).impl + " (B reordered once for its row tiles)" + streamed;
  if (!k_chunked(s)) return impl_->get(s).impl + streamed;
  const MatmulShape chunk = k_chunk_shape(s, std::min(s.k, kKChunk));  // the first chunk
  const size_t part = k_part(chunk);
  return impl_->get(s).impl + " (K in chunks of " + std::to_string(kKChunk) + " on " + impl_->get(chunk).impl +
         (part < chunk.k ? ", parts of " + std::to_string(part) + " summed by the product)" : ")");
}

}  // namespace amp::cpu
