// The fused causal attention (backend/attention_args.h) with its products on oneDNN's BF16 matmul:
// CpuOps' path for BF16 where oneDNN runs BF16 products on AMX (the CpuOps constructor's probe),
// unless set_exact_attention(true). As the CUDA twin's tensor-core path (cuda/attention_tc.h), it keeps
// the flash-attention algorithm's memory (no [T, T] matrix: a query tile's rows at a time, the
// probabilities computed again in backward) and determinism (one (sequence, head) per work item,
// every product single-threaded, fixed orders), and differs from the specification's FP32 chains:
//   - every product (scores, P V, dP, dQ, dK, dV) is a oneDNN product of BF16 operands with FP32
//     accumulation in the kernel's order (fixed for a CPU and a shape, so a run repeats its bits
//     at any thread count);
//   - a tile of kQueryTile queries takes its scores against every key it may see in one product,
//     then each row's softmax as the explicit path computes it (causal_softmax_forward's row
//     kernel: the maximum, exp_f32 and the sum in its 32 lanes, one division); no online rescaling;
//   - P and dS are rounded to BF16 before their products, dS from the explicit path's row kernel
//     (causal_softmax_backward: the dot of the rounded P and dP over the row), so its numbers are
//     the explicit path's (model.attention: explicit) up to the products' summation order;
//   - dK and dV add the query tiles' products in FP32 in tile order and are rounded once;
//   - as in the explicit path, a key or value after a query but inside its tile enters the query's
//     products with a probability of 0: finite values add nothing, an inf or NaN makes the row NaN
//     (the specification never reads them; the step's overflow check sees either).
// row_max and row_sum receive each row's softmax maximum and sum, and delta dout_i . out_i, as the
// specification's (in their own summation orders). Backward computes the probabilities again from
// the scores (the same product: the same bits) and the forward's maximum and sum, which its
// scores would give again. The rows go through the kernel set's BF16 softmax rows (row_kernels.h:
// the FP32 row kernels' values rounded in their last pass; the path runs only where the active
// set has them).
// Memory O(T) per head: per thread a tile's scores, probabilities and dP (kQueryTile x T), the
// head's Q, K, V, dO rows (BF16) and dK, dV (FP32).
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <vector>

#include "backend/attention_args.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/head_rows.h"
#include "backend/cpu/row_kernels.h"
#include "core/aligned_vector.h"
#include "core/convert.h"
#include "core/half.h"

namespace amp::cpu {

namespace {

constexpr int64_t kQueryTile = 64;  // queries per product (part of the path's bits)

// A thread's buffers for one head, kept between calls.
struct MatmulHead {
  // Each on a cache line (core/aligned_vector.h).
  aligned_vector<uint16_t> q, k, v, dout, o, tile16, p16, ds16;
  aligned_vector<float> s, dp, dk, dv, part;  // s: a tile's scores, then its probabilities; dp, then dS

  void size(int64_t T, int64_t D, bool backward) {
    const size_t rows = size_t(T * D), tile = size_t(kQueryTile * T);
    for (auto* b : {&q, &k, &v}) b->resize(rows);
    tile16.resize(size_t(kQueryTile * D));
    for (auto* b : {&p16, &ds16}) b->resize(tile);
    for (auto* b : {&s, &dp}) b->resize(tile);
    if (!backward) return;
    dout.resize(rows), o.resize(rows);
    for (auto* b : {&dk, &dv, &part}) b->resize(rows);
  }
};

// One head's D 16-bit columns at column `col` of sequence b's T rows of a [B*T, ld] tensor, to or
// from dense [T][D] rows.
void take(const void* src, int64_t ld, int64_t b, int64_t col, int64_t T, int64_t D, uint16_t* dst) {
  copy_head_rows16(src, ld, b, col, T, D, dst, D);
}

// The head's query, key and value rows of a [B*T, 3C] qkv.
void take_qkv(const void* qkv, int64_t C, int64_t b, int64_t h, int64_t T, int64_t D, MatmulHead& w) {
  take(qkv, 3 * C, b, h * D, T, D, w.q.data());
  take(qkv, 3 * C, b, C + h * D, T, D, w.k.data());
  take(qkv, 3 * C, b, 2 * C + h * D, T, D, w.v.data());
}

void put(const uint16_t* src, int64_t rows, int64_t D, void* dst, int64_t ld, int64_t row0, int64_t col) {
  put_head_rows16(src, D, rows, D, dst, ld, row0, col);
}

// The products of one work item, on its thread's slot of the matmul.
struct Products {
  DnnlMatmul& mm;
  int slot;
  // C[m, n] = op(A) op(B), BF16 operands, dense, C in c_type.
  void operator()(int64_t m, int64_t n, int64_t k, bool ta, bool tb, const void* a, const void* b, DType c_type,
                  void* c) const {
    MatmulShape s;
    s.m = size_t(m), s.n = size_t(n), s.k = size_t(k), s.trans_a = ta, s.trans_b = tb;
    s.ab = DType::BF16, s.c = c_type;
    mm.run_on(slot, s, a, b, c);
  }
};

// The probabilities of a query tile (rows i0 .. i0 + rows - 1, keys 0 .. n - 1, n = i0 + rows):
// scores S = Q_tile K^T in FP32 (overwritten), each row's softmax over its keys j <= i rounded
// into p16 (zero beyond the diagonal). Forward: each row's maximum and sum into m_out and l_out;
// backward: the probabilities from the forward's, m_in and l_in (the same scores' bits, so the
// same maximum and sum, and the same probabilities).
void tile_probs(const Products& mm, const RowKernels& kern, MatmulHead& w, int64_t i0, int64_t rows, int64_t D,
                float scale, float* m_out, float* l_out, const float* m_in, const float* l_in) {
  const int64_t n = i0 + rows;
  mm(rows, n, D, false, true, w.q.data() + i0 * D, w.k.data(), DType::F32, w.s.data());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t len = i0 + r + 1;
    float* pr = w.s.data() + r * n;
    uint16_t* p16 = w.p16.data() + r * n;
    if (m_in) {
      kern.softmax_probs_bf16(pr, scale, m_in[i0 + r], l_in[i0 + r], p16, len);
    } else {
      float stats[2];
      kern.softmax_forward_bf16(pr, scale, p16, len, stats);
      m_out[i0 + r] = stats[0], l_out[i0 + r] = stats[1];
    }
    std::fill(p16 + len, p16 + n, uint16_t(0));
  }
}

// Runs item(b, h, w, mm) for every (sequence, head) of the call, in parallel: each thread with its
// own buffers and slot of the matmul, every product single-threaded (planned for one thread). The
// first exception is rethrown after the region, the remaining items skipped.
template <typename Item>
void for_heads(DnnlMatmul& matmul, int64_t B, int64_t H, int64_t T, int64_t D, bool backward, Item item) {
  const int64_t items = B * H;
  const int threads = omp_get_max_threads();
  matmul.reserve_slots(threads);
  std::exception_ptr failed;
  std::atomic<bool> stop{false};
#pragma omp parallel num_threads(int(items < threads ? items : threads))
  {
    omp_set_num_threads(1);
    static thread_local MatmulHead w;
    const Products mm{matmul, omp_get_thread_num()};
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < items; ++i) {
      if (stop.load()) continue;
      try {
        w.size(T, D, backward);
        item(i / H, i % H, w, mm);
      } catch (...) {
#pragma omp critical(amp_attention_matmul_failed)
        if (!failed) failed = std::current_exception();
        stop.store(true);
      }
    }
  }
  if (failed) std::rethrow_exception(failed);
}

}  // namespace

bool CpuOps::attention_on_matmul(DType type) const {
  return !exact_attention_ && type == DType::BF16 && attention_matmul_;
}

void CpuOps::attention_forward_matmul(const AttentionArgs& a) {
  std::lock_guard<std::mutex> lock(linear_mu_);  // the matmul's slots
  const RowKernels& kern = active_row_kernels();
  const int64_t T = a.T, D = a.D, C = a.H * D;
  for_heads(matmul_, a.B, a.H, T, D, false, [&](int64_t b, int64_t h, MatmulHead& w, const Products& mm) {
    const int64_t item = b * a.H + h;
    take_qkv(a.qkv, C, b, h, T, D, w);
    for (int64_t i0 = 0; i0 < T; i0 += kQueryTile) {
      const int64_t rows = std::min(kQueryTile, T - i0), n = i0 + rows;
      tile_probs(mm, kern, w, i0, rows, D, a.scale, a.row_max + item * T, a.row_sum + item * T, nullptr, nullptr);
      mm(rows, D, n, false, false, w.p16.data(), w.v.data(), DType::BF16, w.tile16.data());  // P V
      put(w.tile16.data(), rows, D, a.out, C, b * T + i0, h * D);
    }
  });
}

void CpuOps::attention_backward_matmul(const AttentionBackwardArgs& a) {
  std::lock_guard<std::mutex> lock(linear_mu_);
  const RowKernels& kern = active_row_kernels();
  const int64_t T = a.T, D = a.D, C = a.H * D;
  for_heads(matmul_, a.B, a.H, T, D, true, [&](int64_t b, int64_t h, MatmulHead& w, const Products& mm) {
    const int64_t item = b * a.H + h;
    take_qkv(a.qkv, C, b, h, T, D, w);
    take(a.dout, C, b, h * D, T, D, w.dout.data());
    // delta_i = dout_i . out_i in FP32 (the op's scratch output; dS below takes the row's dot of
    // P and dP, as the explicit path).
    take(a.out, C, b, h * D, T, D, w.o.data());
    for (int64_t i = 0; i < T; ++i) {
      float dot = 0.0f;
      const uint16_t* x = w.dout.data() + i * D;
      const uint16_t* y = w.o.data() + i * D;
#pragma omp simd reduction(+ : dot)
      for (int64_t d = 0; d < D; ++d) dot += bf16_bits_to_float(x[d]) * bf16_bits_to_float(y[d]);
      a.delta[item * T + i] = dot;
    }
    std::fill(w.dk.begin(), w.dk.begin() + T * D, 0.0f);
    std::fill(w.dv.begin(), w.dv.begin() + T * D, 0.0f);
    for (int64_t i0 = 0; i0 < T; i0 += kQueryTile) {
      const int64_t rows = std::min(kQueryTile, T - i0), n = i0 + rows;
      tile_probs(mm, kern, w, i0, rows, D, a.scale, nullptr, nullptr, a.row_max + item * T, a.row_sum + item * T);
      mm(rows, n, D, false, true, w.dout.data() + i0 * D, w.v.data(), DType::F32, w.dp.data());  // dP = dO V^T
      for (int64_t r = 0; r < rows; ++r) {  // dS from the rounded P and dP, as the explicit path
        const int64_t len = i0 + r + 1;
        uint16_t* ds16 = w.ds16.data() + r * n;
        kern.softmax_backward_bf16(w.p16.data() + r * n, w.dp.data() + r * n, a.scale, ds16, len);
        std::fill(ds16 + len, ds16 + n, uint16_t(0));
      }
      mm(rows, D, n, false, false, w.ds16.data(), w.k.data(), DType::BF16, w.tile16.data());  // dQ = dS K
      put(w.tile16.data(), rows, D, a.dqkv, 3 * C, b * T + i0, h * D);
      // dK[0, n) += dS^T Q_tile, dV[0, n) += P^T dO_tile: in FP32, tile by tile.
      mm(n, D, rows, true, false, w.ds16.data(), w.q.data() + i0 * D, DType::F32, w.part.data());
      for (int64_t e = 0; e < n * D; ++e) w.dk[size_t(e)] += w.part[size_t(e)];
      mm(n, D, rows, true, false, w.p16.data(), w.dout.data() + i0 * D, DType::F32, w.part.data());
      for (int64_t e = 0; e < n * D; ++e) w.dv[size_t(e)] += w.part[size_t(e)];
    }
    // Rounded once, into the key's and the value's columns (through the tile buffer's rows).
    for (int pass = 0; pass < 2; ++pass) {
      const float* acc = pass == 0 ? w.dk.data() : w.dv.data();
      for (int64_t i0 = 0; i0 < T; i0 += kQueryTile) {
        const int64_t rows = std::min(kQueryTile, T - i0);
        convert(acc + i0 * D, DType::F32, w.tile16.data(), DType::BF16, size_t(rows * D));
        put(w.tile16.data(), rows, D, a.dqkv, 3 * C, b * T + i0, (pass + 1) * C + h * D);
      }
    }
  });
}

}  // namespace amp::cpu
