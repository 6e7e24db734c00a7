// The fused causal attention (backend/attention_args.h) on the CPU: one (sequence, head) per work
// item, in parallel; each item widens its head's rows to FP32 (K and V also transposed, for the
// score and dP products), runs the kernels of attention_kernels.h (the widest the CPU has) and
// rounds its outputs once. Where those products run natively in BF16 (the kernels can and
// bf16_dots_allowed holds for both operands) they read Q's and dO's BF16 rows and K's and V's BF16
// pairs instead, and the FP32 copies only they would read are not made (K's in the forward, K
// transposed and V in the backward). Where the kernels have BF16 products (CpuOps::
// attention_bf16_products) and all of a head's inputs allow them, the head runs on them: its K and
// V rows (and dO's) kept in BF16 for the kernels to pair, Q and K never widened. Work items write
// disjoint outputs, each element by its fixed chain, so the bits do not depend on the thread count.
#include "backend/cpu/no_fp_contract.h"  // first: no FMA contraction in this file

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/attention_args.h"
#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/head_rows.h"
#include "core/aligned_vector.h"
#include "core/convert.h"

namespace amp::cpu {

namespace {

// A thread's FP32 copies of one head (kept between calls: allocating them afresh each call cost
// page faults of the same order as the kernels), each on a cache line (core/aligned_vector.h). The
// padding (columns D .. Dp of the rows, T .. Tp of the transposed) is zeroed when the shape changes
// and never written afterwards: gather writes the first D columns (T positions), and the kernels
// write zeros there in their outputs.
struct HeadScratch {
  int64_t T = 0, D = 0, Dp = 0, Tp = 0;
  bool has_backward = false, has_native = false, has_products = false;
  aligned_vector<float> q, k, kt, v, vt, o, dout, a, b, c;
  aligned_vector<uint16_t> half;  // [T][Dp]: 16-bit rows on their way in or out
  // For native BF16 dot products (AttnHead::q16 ...): Q's and dO's BF16 rows, K's and V's pairs.
  aligned_vector<uint16_t> q16, dout16;  // [T][Dp]
  aligned_vector<uint32_t> kp, vp;       // [Dp/2][Tp]
  // For the BF16 products (AttnHead::k16 ...): K's and V's BF16 rows and the kernels' row pairs.
  aligned_vector<uint16_t> k16, v16;   // [T][Dp]
  aligned_vector<uint32_t> row_pairs;  // [ceil(T/2)][Dp] once (forward), three times (backward)

  // The buffers of the FP32 path, and those of the native BF16 products (native) and of the BF16
  // products (products) only where a call may use them: once a thread has them, they stay.
  void size(int64_t T_, int64_t D_, bool backward, bool native, bool products) {
    if (T_ == T && D_ == D && (has_backward || !backward) && (has_native || !native) &&
        (has_products || !products) && !q.empty())
      return;
    has_backward = has_backward || backward, has_native = has_native || native;
    has_products = has_products || products;
    backward = has_backward, native = has_native, products = has_products;
    // Tp, the transposed arrays' row stride: T rounded up to the key tile, plus 16 floats, so that
    // the D rows of a tile do not all fall into one set of the L1 cache (a 4 KiB stride would).
    T = T_, D = D_, Dp = (D + kAttnPad - 1) / kAttnPad * kAttnPad;
    Tp = (T + kAttnKeyTile - 1) / kAttnKeyTile * kAttnKeyTile + 16;
    const size_t rows = size_t(T * Dp), cols = size_t(D * Tp);
    const size_t pairs = size_t(Dp / 2 * Tp);
    const auto sized = [](auto& v, bool wanted, size_t n) { v.assign(wanted ? n : 0, 0); };
    q.assign(rows, 0.0f), kt.assign(cols, 0.0f), a.assign(rows, 0.0f), half.assign(rows, 0), v.assign(rows, 0.0f);
    sized(q16, native, rows), sized(kp, native, pairs);
    sized(v16, products, rows), sized(row_pairs, products, size_t((T + 1) / 2 * Dp * (backward ? 3 : 1)));
    if (!backward) return;
    k.assign(rows, 0.0f), vt.assign(cols, 0.0f), o.assign(rows, 0.0f), dout.assign(rows, 0.0f);
    b.assign(rows, 0.0f), c.assign(rows, 0.0f);
    sized(dout16, native, rows), sized(vp, native, pairs), sized(k16, native, rows);
  }
};

// dst_t[d][t] = src[t][d] for t < T, d < D (row strides ld_src, ld_dst) of 32-bit elements
// (floats, or pairs of BF16 moved as bits): 8 x 8 blocks through registers with AVX2 (the
// element-by-element loop read each float on its own, about a third of the forward op's own time
// at T = 256), the edges one by one.
template <typename E>
void transpose(const E* src, int64_t T, int64_t D, int64_t ld_src, E* dst_t, int64_t ld_dst) {
  static_assert(sizeof(E) == 4, "32-bit elements");
  int64_t t0 = 0;
#if defined(__AVX2__)
  const auto load = [](const E* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); };
  const auto store = [](E* p, __m256 v) { _mm256_storeu_ps(reinterpret_cast<float*>(p), v); };
  for (; t0 + 8 <= T; t0 += 8) {
    int64_t d0 = 0;
    for (; d0 + 8 <= D; d0 += 8) {
      __m256 r[8], u[8];
      for (int i = 0; i < 8; ++i) r[i] = load(src + (t0 + i) * ld_src + d0);
      for (int i = 0; i < 8; i += 2) u[i] = _mm256_unpacklo_ps(r[i], r[i + 1]), u[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
      // u: rows (i, i + 1) interleaved; then r[c], c < 4: column c of rows 0-3 in its low half,
      // column c + 4 in its high half; r[c + 4]: the same of rows 4-7
      for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(u[i], u[i + 2], 0x44), r[i + 1] = _mm256_shuffle_ps(u[i], u[i + 2], 0xEE);
        r[i + 2] = _mm256_shuffle_ps(u[i + 1], u[i + 3], 0x44), r[i + 3] = _mm256_shuffle_ps(u[i + 1], u[i + 3], 0xEE);
      }
      for (int c = 0; c < 4; ++c) {
        store(dst_t + (d0 + c) * ld_dst + t0, _mm256_permute2f128_ps(r[c], r[c + 4], 0x20));
        store(dst_t + (d0 + c + 4) * ld_dst + t0, _mm256_permute2f128_ps(r[c], r[c + 4], 0x31));
      }
    }
    for (; d0 < D; ++d0)
      for (int64_t t = t0; t < t0 + 8; ++t) std::memcpy(dst_t + d0 * ld_dst + t, src + t * ld_src + d0, 4);
  }
#endif
  for (; t0 < T; ++t0)
    for (int64_t d = 0; d < D; ++d) std::memcpy(dst_t + d * ld_dst + t0, src + t0 * ld_src + d, 4);
}

// The rows t = 0 .. T-1 of one head's D 16-bit columns at element offset `col` of a [B*T, ld]
// tensor, from sequence b, into rows16 [T][Dp].
void copy16(const void* src, int64_t ld, int64_t b, int64_t col, const HeadScratch& s, uint16_t* rows16) {
  copy_head_rows16(src, ld, b, col, s.T, s.D, rows16, s.Dp);
}

// Those rows (FP32 or 16-bit, then widened by one call of the bulk conversion: per-row calls cost
// as much as the kernels at D = 64) into dst [T][Dp], and when dst_t is given transposed into
// [D][Tp].
void gather(const void* src, DType type, int64_t ld, int64_t b, int64_t col, HeadScratch& s, float* dst,
            float* dst_t) {
  const int64_t T = s.T, D = s.D, Dp = s.Dp;
  if (type == DType::F32) {
    const float* x = static_cast<const float*>(src) + b * T * ld + col;
    for (int64_t t = 0; t < T; ++t) {
      if (t + kPrefetchRows < T) prefetch_row(x + (t + kPrefetchRows) * ld, D * 4);
      for (int64_t d = 0; d < D; ++d) dst[t * Dp + d] = x[t * ld + d];
    }
  } else {
    copy16(src, ld, b, col, s, s.half.data());
    convert(s.half.data(), type, dst, DType::F32, size_t(T * Dp));  // the padding's zero bits widen to +0
  }
  if (dst_t) transpose(dst, T, D, Dp, dst_t, s.Tp);
}

// For native BF16 products, the BF16 rows kept (rows16 [T][Dp]) and three steps on them:
// copy_rows16 copies them and says whether they may enter native products (bf16_dots_allowed);
// widen_rows16 widens them into dst (and dst_t transposed, when given), as gather would;
// pair_columns transposes them as pairs into [D/2][Tp] (uint32_t pointers into 16-bit rows:
// transpose only moves their bytes, by intrinsics or memcpy).
bool copy_rows16(const void* src, int64_t ld, int64_t b, int64_t col, const HeadScratch& s, uint16_t* rows16) {
  copy16(src, ld, b, col, s, rows16);
  return bf16_dots_allowed(rows16, s.T * s.Dp);
}

void widen_rows16(const uint16_t* rows16, const HeadScratch& s, float* dst, float* dst_t) {
  convert(rows16, DType::BF16, dst, DType::F32, size_t(s.T * s.Dp));
  if (dst_t) transpose(dst, s.T, s.D, s.Dp, dst_t, s.Tp);
}

void pair_columns(const uint16_t* rows16, const HeadScratch& s, uint32_t* pairs_t) {
  transpose(reinterpret_cast<const uint32_t*>(rows16), s.T, s.D / 2, s.Dp / 2, pairs_t, s.Tp);
}

// Whether this call's heads may run native BF16 products (each head then also by its inputs).
bool native_bf16(const AttnKernels& kern, DType type, int64_t D) {
  return kern.bf16_dots && type == DType::BF16 && D % 2 == 0;
}

// Native BF16 dot products run (pairs of operands given to the kernels), and heads run on the
// BF16 products, for tests.
std::atomic<int64_t> native_products{0}, bf16_product_heads{0};

// The inverse for outputs: src [T][Dp] rounded once into the head's columns.
void scatter(const float* src, void* dst, DType type, int64_t ld, int64_t b, int64_t col, HeadScratch& s) {
  const int64_t T = s.T, D = s.D, Dp = s.Dp;
  if (type == DType::F32) {
    float* y = static_cast<float*>(dst) + b * T * ld + col;
    for (int64_t t = 0; t < T; ++t) {
      if (t + kPrefetchRows < T) prefetch_row(y + (t + kPrefetchRows) * ld, D * 4);  // as gather's reads
      for (int64_t d = 0; d < D; ++d) y[t * ld + d] = src[t * Dp + d];
    }
    return;
  }
  uint16_t* h = s.half.data();
  convert(src, DType::F32, h, type, size_t(T * Dp));  // the padding (zeros) stays zero bits
  put_head_rows16(h, Dp, T, D, dst, ld, b * T, col);
}

}  // namespace

const char* CpuOps::attention_isa() const { return active_attention_kernels().isa; }

bool CpuOps::attention_bf16_products(DType type) const {
  return !exact_attention_ && type == DType::BF16 && !attention_matmul_ &&
         active_attention_kernels().forward_bf16_products != nullptr;
}

int64_t attention_native_bf16_products() { return native_products.load(std::memory_order_relaxed); }
int64_t attention_bf16_product_heads() { return bf16_product_heads.load(std::memory_order_relaxed); }

void CpuOps::attention_forward(const AttentionArgs& a) {
  check_args(a);
  if (a.B * a.T * a.H * a.D == 0) return;
  if (attention_on_matmul(a.type)) return attention_forward_matmul(a);
  const AttnKernels& kern = active_attention_kernels();
  const int64_t C = a.H * a.D, items = a.B * a.H;
  const bool native = native_bf16(kern, a.type, a.D);
  const bool products = native && attention_bf16_products(a.type);
#pragma omp parallel if (items > 1 && a.T * a.T * a.D >= 4096)
  {
    static thread_local HeadScratch s;
    s.size(a.T, a.D, false, native, products);
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t b = item / a.H, h = item % a.H;
      // The score product: natively from Q's BF16 rows and K's pairs where both may (then neither
      // is widened: the forward reads K only in that product), else in FP32 from Q's rows and K
      // transposed. With the BF16 products, where V may too, P V from V's BF16 rows (V never
      // widened).
      bool use_native = false, use_products = false;
      if (native) {
        const bool q_ok = copy_rows16(a.qkv, 3 * C, b, h * a.D, s, s.q16.data());
        const bool k_ok = copy_rows16(a.qkv, 3 * C, b, C + h * a.D, s, s.half.data());
        use_native = q_ok && k_ok;
        if (use_native) {
          pair_columns(s.half.data(), s, s.kp.data());
          use_products = products && copy_rows16(a.qkv, 3 * C, b, 2 * C + h * a.D, s, s.v16.data());
        } else {
          widen_rows16(s.q16.data(), s, s.q.data(), nullptr);
          widen_rows16(s.half.data(), s, s.a.data(), s.kt.data());  // K only transposed
        }
      } else {
        gather(a.qkv, a.type, 3 * C, b, h * a.D, s, s.q.data(), nullptr);
        gather(a.qkv, a.type, 3 * C, b, C + h * a.D, s, s.a.data(), s.kt.data());  // K only transposed
      }
      if (!use_products) gather(a.qkv, a.type, 3 * C, b, 2 * C + h * a.D, s, s.v.data(), nullptr);
      AttnHead head;
      head.T = s.T, head.D = s.D, head.Dp = s.Dp, head.Tp = s.Tp, head.scale = a.scale;
      head.q = s.q.data(), head.kt = s.kt.data(), head.v = s.v.data();
      head.pair_dots = a.type == DType::BF16;
      if (use_native) head.q16 = s.q16.data(), head.kp16 = s.kp.data(), ++native_products;
      if (use_products) head.v16 = s.v16.data(), head.pairs = s.row_pairs.data(), ++bf16_product_heads;
      head.out = s.a.data(), head.m_out = a.row_max + item * a.T, head.l_out = a.row_sum + item * a.T;
      (use_products ? kern.forward_bf16_products : kern.forward)(head);
      scatter(s.a.data(), a.out, a.type, C, b, h * a.D, s);
    }
  }
}

void CpuOps::attention_backward(const AttentionBackwardArgs& a) {
  check_args(a);
  if (a.B * a.T * a.H * a.D == 0) return;
  if (attention_on_matmul(a.type)) return attention_backward_matmul(a);
  const AttnKernels& kern = active_attention_kernels();
  const int64_t C = a.H * a.D, items = a.B * a.H;
  const bool native = native_bf16(kern, a.type, a.D);
  const bool products = native && attention_bf16_products(a.type);
#pragma omp parallel if (items > 1 && a.T * a.T * a.D >= 4096)
  {
    static thread_local HeadScratch s;
    s.size(a.T, a.D, true, native, products);
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t b = item / a.H, h = item % a.H;
      // Q's, K's and dO's rows are read in FP32 (dK's, dQ's and dV's products), V's only by the dP
      // product. The score product runs natively from Q's BF16 rows and K's pairs where both may,
      // dP from dO's rows and V's pairs (then V is never widened); otherwise from K and V
      // transposed in FP32. With the BF16 products, where all four may, dQ, dK and dV from the
      // BF16 rows of K, Q and dO (Q and K never widened; dO is, for delta).
      bool qk_native = false, dv_native = false, use_products = false;
      if (native) {
        const bool q_ok = copy_rows16(a.qkv, 3 * C, b, h * a.D, s, s.q16.data());
        const bool k_ok = copy_rows16(a.qkv, 3 * C, b, C + h * a.D, s, s.k16.data());
        const bool do_ok = copy_rows16(a.dout, C, b, h * a.D, s, s.dout16.data());
        const bool v_ok = copy_rows16(a.qkv, 3 * C, b, 2 * C + h * a.D, s, s.half.data());
        qk_native = q_ok && k_ok;
        dv_native = do_ok && v_ok;
        use_products = products && qk_native && dv_native;
        if (!use_products) {
          widen_rows16(s.q16.data(), s, s.q.data(), nullptr);
          widen_rows16(s.k16.data(), s, s.k.data(), qk_native ? nullptr : s.kt.data());
        }
        if (qk_native) pair_columns(s.k16.data(), s, s.kp.data());
        widen_rows16(s.dout16.data(), s, s.dout.data(), nullptr);
        if (dv_native)
          pair_columns(s.half.data(), s, s.vp.data());
        else
          widen_rows16(s.half.data(), s, s.a.data(), s.vt.data());  // V only transposed
      } else {
        gather(a.qkv, a.type, 3 * C, b, h * a.D, s, s.q.data(), nullptr);
        gather(a.qkv, a.type, 3 * C, b, C + h * a.D, s, s.k.data(), s.kt.data());
        gather(a.qkv, a.type, 3 * C, b, 2 * C + h * a.D, s, s.a.data(), s.vt.data());  // V only transposed
        gather(a.dout, a.type, C, b, h * a.D, s, s.dout.data(), nullptr);
      }
      gather(a.out, a.type, C, b, h * a.D, s, s.o.data(), nullptr);
      AttnHead head;
      head.T = s.T, head.D = s.D, head.Dp = s.Dp, head.Tp = s.Tp, head.scale = a.scale;
      head.q = s.q.data(), head.k = s.k.data(), head.kt = s.kt.data(), head.vt = s.vt.data();
      head.o = s.o.data(), head.dout = s.dout.data();
      head.pair_dots = a.type == DType::BF16;
      if (qk_native) head.q16 = s.q16.data(), head.kp16 = s.kp.data(), ++native_products;
      if (dv_native) head.dout16 = s.dout16.data(), head.vp16 = s.vp.data(), ++native_products;
      if (use_products) head.k16 = s.k16.data(), head.pairs = s.row_pairs.data(), ++bf16_product_heads;
      head.m = a.row_max + item * a.T, head.l = a.row_sum + item * a.T, head.delta = a.delta + item * a.T;
      head.dq = s.a.data(), head.dk = s.b.data(), head.dv = s.c.data();
      (use_products ? kern.backward_bf16_products : kern.backward)(head);
      scatter(s.a.data(), a.dqkv, a.type, 3 * C, b, h * a.D, s);
      scatter(s.b.data(), a.dqkv, a.type, 3 * C, b, C + h * a.D, s);
      scatter(s.c.data(), a.dqkv, a.type, 3 * C, b, 2 * C + h * a.D, s);
    }
  }
}

}  // namespace amp::cpu
