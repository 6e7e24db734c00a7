// The fused attention's tile kernels for one (sequence, head), written once over a vector type V
// (W float lanes: load, store, set1, zero, add, sub, mul, div, fma, and exp_nonpositive:
// tmath::exp_f32 lane for lane for arguments <= 0 or NaN, every exp here being of a score minus a
// maximum; kBf16Dots, and where it is true Words, load_words, set1_pair and dot_pairs: VDPBF16PS)
// and compiled per ISA:
// attention_kernels.cpp instantiates them with AVX2 + FMA (8 lanes), attention_avx512.cpp with
// AVX-512F (16 lanes) and with AVX-512F + AVX-512-BF16 (native BF16 score and dP products). Each
// output element is the fixed FMA chain of backend/attention_args.h: vectors run across
// independent outputs (keys of a score row, or the D columns of an accumulator), never across the
// terms of one sum (a native BF16 lane's pair is the chain's two terms, in order), so every width
// gives the specification's bits.
// The tile sum is the specification's 8 lanes at every width.
//
// No includes: the including file includes everything first (immintrin.h, transformer_rows.h,
// attention_kernels.h) and then this file inside its own anonymous namespace, so that no inline
// function compiled for one ISA can be merged with another's at link time.

// The tiles' loops are compiled each on its own (noinline): inlined into forward and backward, one
// function of thousands of instructions, they were at the mercy of GCC's register allocation for
// the whole, which in some builds kept a loop's accumulators on the stack (a store of every
// accumulator at every step: the backward about 20% slower at T = 1024 after an unrelated change).
// A call costs nothing next to a loop's 1024 or more FMAs.
#ifndef AMP_TILE_LOOP
#define AMP_TILE_LOOP __attribute__((noinline))
#endif

#include "backend/cpu/attention_pairs.h"

template <class V>
struct AttnTiles {
  using Vec = typename V::Vec;
  static constexpr int W = V::W;
  static constexpr int KT = int(kAttnKeyTile);  // keys per tile
  static constexpr int R = 4;                   // query rows per register block
  // Register blocks fit the register file: 32 vector registers with AVX-512 (R x 4 accumulators
  // and 4 operands), 16 with AVX2 (R x 2 and 2).
  static constexpr int U = W == 16 ? 4 : 2;     // vectors of keys per register block of the scores
  static constexpr int GMAX = W == 16 ? 4 : 2;  // vectors of columns per accumulation block
  static_assert(KT % (U * W) == 0 || (U * W) % KT == 0, "key tile and register block");
  static constexpr int KC = U * W < KT ? U * W : KT;  // keys per register block

  // The d-th term of a dot over D: d itself, or with pair order (BF16) its pair partner, the odd
  // element first (the last element alone when D is odd).
  static int64_t term(int64_t d, int64_t D, bool pair) {
    const int64_t e = d ^ int64_t(pair);
    return e < D ? e : d;
  }

  // out[r][c] = alpha * dot(a_row(r), bt[:, j0 + c]) for r < R, c < keys rounded up to a multiple
  // of 16 (at most KT; the causal mask needs no more: the other columns are left as they were):
  // rows of `a` (stride lda) starting at row i0, rows past nr repeat the last one (computed, never
  // used); bt is [D][ldb]. With a16 and bp (native BF16 products, V::kBf16Dots): the same rows as
  // BF16 and bt as pairs [D/2][ldb] of 32-bit words, one VDPBF16PS per pair.
  static void dots(const float* a, int64_t lda, int64_t i0, int nr, const float* bt, int64_t ldb, int64_t j0,
                   int64_t D, bool pair, const uint16_t* a16, const uint32_t* bp, bool scaled, float alpha,
                   int keys, float (*out)[KT]) {
    const bool native = V::kBf16Dots && a16 && bp;
    const float* row[R];
    const uint16_t* row16[R];
    for (int r = 0; r < R; ++r) {
      const int64_t i = i0 + (r < nr ? r : nr - 1);
      row[r] = a + i * lda;
      row16[r] = native ? a16 + i * lda : nullptr;
    }
    const int end = extent(keys);
    for (int c0 = 0; c0 < end; c0 += KC) {
      const int vecs = (end - c0) / W < U ? (end - c0) / W : U;
      const auto run = [&](auto u) {
        dots_block<decltype(u)::value>(row, row16, native, bt, ldb, j0 + c0, D, pair, bp, scaled, alpha, out, c0);
      };
      if (vecs >= U)
        run(std::integral_constant<int, U>());
      else if (vecs == 3)
        run(std::integral_constant<int, 3 < U ? 3 : U>());
      else if (vecs == 2)
        run(std::integral_constant<int, 2 < U ? 2 : U>());
      else
        run(std::integral_constant<int, 1>());
    }
  }

  // The columns of a key tile that the tiles compute for `keys` keys: a multiple of 16 (KT a
  // multiple of it, and of W and KC).
  static int extent(int keys) { return (keys + 15) / 16 * 16 < KT ? (keys + 15) / 16 * 16 : KT; }

  // dots' UN vectors of keys at column c0 (key j = j0 + c0 + ...; bp and bt from j).
  template <int UN>
  AMP_TILE_LOOP static void dots_block(const float* const* row, const uint16_t* const* row16, bool native,
                                       const float* bt, int64_t ldb, int64_t j, int64_t D, bool pair,
                                       const uint32_t* bp, bool scaled, float alpha, float (*out)[KT], int c0) {
    Vec acc[R][UN];
    for (int r = 0; r < R; ++r)
      for (int u = 0; u < UN; ++u) acc[r][u] = V::zero();
    if constexpr (V::kBf16Dots) {
      if (native) {
        const uint32_t* b = bp + j;
        for (int64_t p = 0; p < D / 2; ++p) {
          typename V::Words kv[UN];
          for (int u = 0; u < UN; ++u) kv[u] = V::load_words(b + p * ldb + u * W);
          for (int r = 0; r < R; ++r) {
            const typename V::Words qb = V::set1_pair(row16[r] + 2 * p);
            for (int u = 0; u < UN; ++u) acc[r][u] = V::dot_pairs(acc[r][u], qb, kv[u]);
          }
        }
      }
    }
    if (!native && !pair) {  // FP32 inputs: the terms in order, the operands by pointer steps
      const float* b = bt + j;
      for (int64_t d = 0; d < D; ++d, b += ldb) {
        Vec kv[UN];
        for (int u = 0; u < UN; ++u) kv[u] = V::load(b + u * W);
        for (int r = 0; r < R; ++r) {
          const Vec qb = V::set1(row[r][d]);
          for (int u = 0; u < UN; ++u) acc[r][u] = V::fma(qb, kv[u], acc[r][u]);
        }
      }
    } else if (!native) {
      const float* b = bt + j;
      for (int64_t d = 0; d < D; ++d) {
        const int64_t e = term(d, D, pair);
        Vec kv[UN];
        for (int u = 0; u < UN; ++u) kv[u] = V::load(b + e * ldb + u * W);
        for (int r = 0; r < R; ++r) {
          const Vec qb = V::set1(row[r][e]);
          for (int u = 0; u < UN; ++u) acc[r][u] = V::fma(qb, kv[u], acc[r][u]);
        }
      }
    }
    const Vec s = V::set1(alpha);
    for (int r = 0; r < R; ++r)
      for (int u = 0; u < UN; ++u)  // scores: scale * dot + 0 (no -0: the maxima need no order)
        V::store(&out[r][c0 + u * W], scaled ? V::add(V::mul(s, acc[r][u]), V::zero()) : acc[r][u]);
  }

  // The online softmax's step for the R rows of a register block, the rows' independent chains
  // side by side (one row at a time left the core waiting on each row's maximum, exp and sum):
  //   m' = max(m, s_0 .. s_KT-1), NaN when any of them is NaN (the scores hold no -0: the
  //        specification adds +0, so the maximum does not depend on the order of the comparisons);
  //   corr = exp(m - m')  (<= 0 or NaN: the vector exp's lanes are exp_f32's bits);
  //   p_c = exp(s_c - m') for c < n[r], 0 after;  l = l * corr + tile_sum(p);  m = m'.
  // Only the first kc = extent(max n) columns are read and written (those dots computed): the keys
  // past them are masked for every row, and tile_sum's lanes would only add +0 for them.
  // s is modified: the keys after each row's query become -inf.
  AMP_TILE_LOOP static void online_softmax(float (*s)[KT], float (*p)[KT], const int* n, int kc, float* m, float* l,
                                           float* corr) {
    static_assert(R == 4 && KT % 16 == 0, "the reductions below are written for 4 rows and 16-key steps");
    __m256 mx[R];
    int any_nan = 0;
    for (int r = 0; r < R; ++r) {
      for (int c = n[r]; c < kc; ++c) s[r][c] = -__builtin_inff();  // keys after the query
      __m256 a = _mm256_set1_ps(m[r]), b = a, nan = _mm256_cmp_ps(a, a, _CMP_UNORD_Q);
      for (int c = 0; c < kc; c += 16) {  // two chains of maxima
        const __m256 x = _mm256_loadu_ps(s[r] + c), y = _mm256_loadu_ps(s[r] + c + 8);
        a = _mm256_max_ps(a, x), b = _mm256_max_ps(b, y);
        nan = _mm256_or_ps(nan, _mm256_or_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q), _mm256_cmp_ps(y, y, _CMP_UNORD_Q)));
      }
      mx[r] = _mm256_max_ps(a, b);
      any_nan |= (_mm256_movemask_ps(nan) != 0) << r;
    }
    // The 4 rows' 8-lane maxima to one lane each: [r0 r1 r2 r3] in the low 128 bits.
    const __m256 t01 = _mm256_max_ps(_mm256_unpacklo_ps(mx[0], mx[1]), _mm256_unpackhi_ps(mx[0], mx[1]));
    const __m256 t23 = _mm256_max_ps(_mm256_unpacklo_ps(mx[2], mx[3]), _mm256_unpackhi_ps(mx[2], mx[3]));
    const __m256 t = _mm256_max_ps(_mm256_shuffle_ps(t01, t23, 0x44), _mm256_shuffle_ps(t01, t23, 0xEE));
    __m128 mt = _mm_max_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    if (any_nan) {
      alignas(16) float x[4];
      _mm_store_ps(x, mt);
      for (int r = 0; r < R; ++r)
        if (any_nan >> r & 1) x[r] = __builtin_nanf("");
      mt = _mm_load_ps(x);
    }
    alignas(64) float e[W] = {};
    _mm_storeu_ps(e, _mm_sub_ps(_mm_loadu_ps(m), mt));
    V::store(e, V::exp_nonpositive(V::load(e)));
    _mm_storeu_ps(corr, _mm_loadu_ps(e));
    alignas(16) float mts[4];
    _mm_store_ps(mts, mt);
    for (int r = 0; r < R; ++r) {
      // s - m' <= 0 or NaN: m' is the maximum of the tile's scores and the running maximum
      const Vec vm = V::set1(mts[r]);
      for (int c = 0; c < kc; c += W) V::store(&p[r][c], V::exp_nonpositive(V::sub(V::load(&s[r][c]), vm)));
      for (int c = n[r]; c < kc; ++c) p[r][c] = 0.0f;
    }
    // tile_sum's 8 lanes per row (each lane's chain in key order), then per row
    // ((L0 + L1) + (L2 + L3)) + ((L4 + L5) + (L6 + L7)): hadd pairs lanes (0,1) (2,3) within halves.
    __m256 lanes[R];
    for (int r = 0; r < R; ++r) {
      lanes[r] = _mm256_add_ps(_mm256_setzero_ps(), _mm256_loadu_ps(p[r]));
      for (int c = 8; c < kc; c += 8) lanes[r] = _mm256_add_ps(lanes[r], _mm256_loadu_ps(p[r] + c));
    }
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(lanes[0], lanes[1]), _mm256_hadd_ps(lanes[2], lanes[3]));
    const __m128 sum = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    _mm_storeu_ps(l, _mm_add_ps(_mm_mul_ps(_mm_loadu_ps(l), _mm_loadu_ps(corr)), sum));
    _mm_storeu_ps(m, mt);
  }

  // For rows r < nr: acc_r = acc_r * mul[r] (when mul is given), then acc_r = fma(w[r][c], rows[c],
  // acc_r) for c < n (rows stride ld); G vectors of columns at a time, so R * G independent chains
  // are in flight.
  template <int G>
  AMP_TILE_LOOP static void accumulate_block(float* acc, int64_t ld_acc, int nr, const float* mul,
                                             const float (*w)[KT], int n, const float* rows, int64_t ld, int64_t k) {
    Vec a[R][G];
    for (int r = 0; r < R; ++r)
      for (int g = 0; g < G; ++g) {
        a[r][g] = r < nr ? V::load(acc + r * ld_acc + k + g * W) : V::zero();
        if (mul && r < nr) a[r][g] = V::mul(a[r][g], V::set1(mul[r]));
      }
    for (int c = 0; c < n; ++c) {
      Vec x[G];
      for (int g = 0; g < G; ++g) x[g] = V::load(rows + c * ld + k + g * W);
      for (int r = 0; r < R; ++r) {
        const Vec wb = V::set1(w[r][c]);
        for (int g = 0; g < G; ++g) a[r][g] = V::fma(wb, x[g], a[r][g]);
      }
    }
    for (int r = 0; r < nr; ++r)
      for (int g = 0; g < G; ++g) V::store(acc + r * ld_acc + k + g * W, a[r][g]);
  }

  // accumulate_block over every column of Dp (a multiple of W): groups of 4, 2, then 1 vectors.
  static void accumulate(float* acc, int64_t ld_acc, int nr, const float* mul, const float (*w)[KT], int n,
                         const float* rows, int64_t ld, int64_t Dp) {
    int64_t k = 0;
    if (GMAX >= 4)
      for (; k + 4 * W <= Dp; k += 4 * W) accumulate_block<4>(acc, ld_acc, nr, mul, w, n, rows, ld, k);
    for (; k + 2 * W <= Dp; k += 2 * W) accumulate_block<2>(acc, ld_acc, nr, mul, w, n, rows, ld, k);
    for (; k < Dp; k += W) accumulate_block<1>(acc, ld_acc, nr, mul, w, n, rows, ld, k);
  }

  // One row's chain continued over c in [c0, c1): acc = fma(w[c], rows[c], acc).
  AMP_TILE_LOOP static void accumulate_row(float* acc, const float* w, int c0, int c1, const float* rows, int64_t ld,
                                           int64_t Dp) {
    for (int64_t k = 0; k < Dp; k += W) {
      Vec a = V::load(acc + k);
      for (int c = c0; c < c1; ++c) a = V::fma(V::set1(w[c]), V::load(rows + c * ld + k), a);
      V::store(acc + k, a);
    }
  }

  // Rows i0 .. i0 + nr - 1 against the key tile at j0: row r has keys c < n[r] (n[0] the fewest).
  // The keys all rows have run blocked, the rest row by row, so every chain stays in key order and
  // no row reads a key after its query.
  static void accumulate_rows(float* acc, int64_t Dp, int nr, const float* mul, const float (*w)[KT], const int* n,
                              const float* rows) {
    accumulate(acc, Dp, nr, mul, w, n[0], rows, Dp, Dp);
    for (int r = 0; r < nr; ++r)
      if (n[r] > n[0]) accumulate_row(acc + r * Dp, w[r], n[0], n[r], rows, Dp, Dp);
  }

  // dst[c] = fma(w[r][c], rows[r], dst[c]) for r = r_start[c] .. nr - 1 in order, c < nk: the
  // columns' chains over rows (dK, dV). Four columns at a time share each row's loads: the rows
  // every one of the four has run blocked, after each column's own earlier rows.
  static void accumulate_columns(float* dst, int64_t Dp, int nk, const float (*w)[KT], const int* r_start, int nr,
                                 const float* rows, int64_t ld) {
    int c = 0;
    for (; c + 4 <= nk; c += 4) {
      int rc = r_start[c];
      for (int x = 1; x < 4; ++x) rc = r_start[c + x] > rc ? r_start[c + x] : rc;
      if (rc > nr) rc = nr;
      for (int x = 0; x < 4; ++x) column_range(dst + (c + x) * Dp, Dp, w, c + x, r_start[c + x], rc, rows, ld);
      if (rc >= nr) continue;
      int64_t k = 0;
      if (GMAX >= 4)
        for (; k + 4 * W <= Dp; k += 4 * W) columns4_block<4>(dst + c * Dp, Dp, k, w, c, rc, nr, rows, ld);
      for (; k + 2 * W <= Dp; k += 2 * W) columns4_block<2>(dst + c * Dp, Dp, k, w, c, rc, nr, rows, ld);
      for (; k < Dp; k += W) columns4_block<1>(dst + c * Dp, Dp, k, w, c, rc, nr, rows, ld);
    }
    for (; c < nk; ++c) column_range(dst + c * Dp, Dp, w, c, r_start[c], nr, rows, ld);
  }

  // One column's chain over rows r0 .. r1 - 1.
  AMP_TILE_LOOP static void column_range(float* d, int64_t Dp, const float (*w)[KT], int c, int r0, int r1,
                                         const float* rows, int64_t ld) {
    if (r0 >= r1) return;
    for (int64_t k = 0; k < Dp; k += W) {
      Vec a = V::load(d + k);
      for (int r = r0; r < r1; ++r) a = V::fma(V::set1(w[r][c]), V::load(rows + r * ld + k), a);
      V::store(d + k, a);
    }
  }

  // Columns c .. c + 3 (rows of dst, stride Dp) over rows r0 .. r1 - 1, G vectors at column k.
  template <int G>
  AMP_TILE_LOOP static void columns4_block(float* dst, int64_t Dp, int64_t k, const float (*w)[KT], int c, int r0,
                                           int r1, const float* rows, int64_t ld) {
    Vec a[4][G];
    for (int x = 0; x < 4; ++x)
      for (int g = 0; g < G; ++g) a[x][g] = V::load(dst + x * Dp + k + g * W);
    for (int r = r0; r < r1; ++r) {
      Vec y[G];
      for (int g = 0; g < G; ++g) y[g] = V::load(rows + r * ld + k + g * W);
      for (int x = 0; x < 4; ++x) {
        const Vec wb = V::set1(w[r][c + x]);
        for (int g = 0; g < G; ++g) a[x][g] = V::fma(wb, y[g], a[x][g]);
      }
    }
    for (int x = 0; x < 4; ++x)
      for (int g = 0; g < G; ++g) V::store(dst + x * Dp + k + g * W, a[x][g]);
  }

  // out[i] = dot(x_i, y_i) over D terms (term()'s order) for rows i < T (stride ld): each row's
  // chain alone, 8 rows' chains side by side (one row at a time waited on each FMA's latency).
  AMP_TILE_LOOP static void row_dots(const float* x, const float* y, int64_t T, int64_t D, int64_t ld, bool pair,
                                     float* out) {
    constexpr int N = 8;
    int64_t i = 0;
    for (; i + N <= T; i += N) {
      float a[N] = {};
      for (int64_t d = 0; d < D; ++d) {
        const int64_t e = term(d, D, pair);
        for (int r = 0; r < N; ++r) a[r] = __builtin_fmaf(x[(i + r) * ld + e], y[(i + r) * ld + e], a[r]);
      }
      for (int r = 0; r < N; ++r) out[i + r] = a[r];
    }
    for (; i < T; ++i) {
      float a = 0.0f;
      for (int64_t d = 0; d < D; ++d) {
        const int64_t e = term(d, D, pair);
        a = __builtin_fmaf(x[i * ld + e], y[i * ld + e], a);
      }
      out[i] = a;
    }
  }

  // Forward: blocks of RF query rows (SB register blocks of R) sweep the key tiles together, so a
  // tile's keys and values are read from the L1 cache by every register block after the first.
  static constexpr int SB = 4, RF = SB * R;

  static void forward(const AttnHead& h) { forward_with<false>(h); }
  // The BF16 products (attention_pairs.h): P rounded, P V on VDPBF16PS. Only for V::kBf16Dots,
  // with h.q16, h.kp16, h.v16 and h.pairs.
  static void forward_bf16_products(const AttnHead& h) { forward_with<true>(h); }

  template <bool kPairs>
  static void forward_with(const AttnHead& h) {
    const int64_t T = h.T, Dp = h.Dp, Tp = h.Tp;
    alignas(64) float s[R][KT];
    alignas(64) float p[R][KT];
    [[maybe_unused]] alignas(64) uint16_t p16[kPairs ? R : 1][KT];  // P rounded (kPairs)
    [[maybe_unused]] const uint32_t* v_pairs = h.pairs;              // V's rows paired (kPairs)
    if constexpr (kPairs) AttnPairs<V>::pair_rows(h.v16, T, Dp, h.pairs);
    for (int64_t f0 = 0; f0 < T; f0 += RF) {
      const int nf = int(T - f0 < RF ? T - f0 : RF);
      // The block's accumulators start at +0 here, where the first tile reads them (not in one
      // sweep over all T * Dp floats up front).
      for (int64_t i = f0 * Dp; i < (f0 + nf) * Dp; ++i) h.out[i] = 0.0f;
      float m[RF], l[RF];
      for (int r = 0; r < RF; ++r) m[r] = -__builtin_inff(), l[r] = 0.0f;
      const int64_t last_tile = (f0 + nf - 1) / KT;
      for (int64_t t = 0; t <= last_tile; ++t) {
        const int64_t j0 = t * KT;
        for (int b = 0; b * R < nf; ++b) {
          const int64_t i0 = f0 + b * R;
          if (i0 < j0) continue;  // this register block's queries all precede the tile
          const int nr = int(nf - b * R < R ? nf - b * R : R);
          float corr[R];
          int n[R];
          for (int r = 0; r < R; ++r) n[r] = int(i0 + r - j0 + 1 < KT ? i0 + r - j0 + 1 : KT);
          const int keys = n[nr - 1];  // the block's last row sees the most keys
          dots(h.q, Dp, i0, nr, h.kt, Tp, j0, h.D, h.pair_dots, h.q16, h.kp16, true, h.scale, keys, s);
          online_softmax(s, p, n, extent(keys), m + b * R, l + b * R, corr);
          if constexpr (kPairs) {
            AttnPairs<V>::round_rows(p, nr, n, R, extent(keys), p16);
            AttnPairs<V>::template rows<R>(h.out + i0 * Dp, nr, corr, p16, (keys + 1) / 2, v_pairs + j0 / 2 * Dp, Dp);
          } else {
            accumulate_rows(h.out + i0 * Dp, Dp, nr, corr, p, n, h.v + j0 * Dp);
          }
        }
      }
      for (int r = 0; r < nf; ++r) {
        float* o = h.out + (f0 + r) * Dp;
        const Vec vl = V::set1(l[r]);
        for (int64_t k = 0; k < Dp; k += W) V::store(o + k, V::div(V::load(o + k), vl));
        h.m_out[f0 + r] = m[r];
        h.l_out[f0 + r] = l[r];
      }
    }
  }

  // Backward: per key tile, blocks of RB query rows (R at a time in registers): their scores and
  // dP, then P (over the scores) and dS (over dP); dQ's chains continue row by row over the tile's
  // keys, dK's and dV's over the block's rows (RB terms per column before the column's
  // accumulators go back to memory). The two tiles of the block, 2 * RB * KT floats, stay in L1.
  static constexpr int RB = 8 * R;

  static void backward(const AttnHead& h) { backward_with<false>(h); }
  // The BF16 products: P and dS rounded, dQ, dK and dV on VDPBF16PS. Only for V::kBf16Dots, with
  // h.q16, h.kp16, h.dout16, h.vp16, h.k16 and h.pairs.
  static void backward_bf16_products(const AttnHead& h) { backward_with<true>(h); }

  template <bool kPairs>
  static void backward_with(const AttnHead& h) {
    const int64_t T = h.T, D = h.D, Dp = h.Dp, Tp = h.Tp;
    row_dots(h.dout, h.o, T, D, Dp, h.pair_dots, h.delta);
    alignas(64) float p[RB][KT];   // the scores, then P
    alignas(64) float ds[RB][KT];  // dP, then dS
    // kPairs: Q's, K's and dO's rows paired; a block's dS rows rounded; P and dS paired by columns.
    [[maybe_unused]] const uint32_t *q_pairs = nullptr, *k_pairs = nullptr, *dout_pairs = nullptr;
    [[maybe_unused]] alignas(64) uint16_t ds16[kPairs ? RB : 1][KT];
    [[maybe_unused]] alignas(64) uint32_t by_columns[kPairs ? RB / 2 : 1][KT];
    if constexpr (kPairs) {
      const int64_t paired = (T + 1) / 2 * Dp;  // words per paired operand
      AttnPairs<V>::pair_rows(h.q16, T, Dp, h.pairs);
      AttnPairs<V>::pair_rows(h.k16, T, Dp, h.pairs + paired);
      AttnPairs<V>::pair_rows(h.dout16, T, Dp, h.pairs + 2 * paired);
      q_pairs = h.pairs, k_pairs = h.pairs + paired, dout_pairs = h.pairs + 2 * paired;
    }
    const Vec vscale = V::set1(h.scale);
    // The accumulators start at +0 where they are first used, while they are in the caches: dK's
    // and dV's rows of a key tile before the tile (only it writes them), dQ's rows of a block in
    // the first key tile (which reaches every query).
    for (int64_t j0 = 0; j0 < T; j0 += KT) {
      const int nk = int(T - j0 < KT ? T - j0 : KT);
      for (int64_t i = j0 * Dp; i < (j0 + nk) * Dp; ++i) h.dk[i] = 0.0f, h.dv[i] = 0.0f;
      for (int64_t i0 = j0; i0 < T; i0 += RB) {
        const int nr = int(T - i0 < RB ? T - i0 : RB);
        if (j0 == 0)
          for (int64_t i = i0 * Dp; i < (i0 + nr) * Dp; ++i) h.dq[i] = 0.0f;
        // Row r's keys: c < n[r]. Only they are read below (dQ's rows by n, dK's and dV's columns
        // by r_start), so the products and P and dS run over extent(n) columns, not the tile's.
        int n[RB];
        for (int r = 0; r < nr; ++r) n[r] = int(i0 + r - j0 + 1 < nk ? i0 + r - j0 + 1 : nk);
        // All the block's scores, then all its dP: each product's tile of K or V transposed (16 KiB
        // at D = 64) stays in L1 for the block's rows.
        for (int g = 0; g * R < nr; ++g) {
          const int nh = nr - g * R < R ? nr - g * R : R, keys = n[g * R + nh - 1];
          dots(h.q, Dp, i0 + g * R, nh, h.kt, Tp, j0, D, h.pair_dots, h.q16, h.kp16, true, h.scale, keys, p + g * R);
        }
        for (int g = 0; g * R < nr; ++g) {
          const int nh = nr - g * R < R ? nr - g * R : R, keys = n[g * R + nh - 1];
          dots(h.dout, Dp, i0 + g * R, nh, h.vt, Tp, j0, D, h.pair_dots, h.dout16, h.vp16, false, 1.0f, keys, ds + g * R);
        }
        for (int r = 0; r < nr; ++r) {
          const int64_t i = i0 + r;
          const int kc = extent(n[r]);
          const Vec vm = V::set1(h.m[i]), vl = V::set1(h.l[i]);
          // s - m <= 0 or NaN for the keys up to the query (the forward's maximum of the same
          // scores' bits); the later columns are zeroed below (the BF16 products mask them instead,
          // rounding P and dS).
          for (int c = 0; c < kc; c += W)
            V::store(&p[r][c], V::div(V::exp_nonpositive(V::sub(V::load(&p[r][c]), vm)), vl));
          const Vec vdelta = V::set1(h.delta[i]);
          for (int c = 0; c < kc; c += W)  // softmax_ds: (scale * P) * (dP - delta)
            V::store(&ds[r][c], V::mul(V::mul(vscale, V::load(&p[r][c])), V::sub(V::load(&ds[r][c]), vdelta)));
          if constexpr (!kPairs)
            for (int c = n[r]; c < kc; ++c) p[r][c] = 0.0f, ds[r][c] = 0.0f;
        }
        int r_start[KT];
        for (int c = 0; c < nk; ++c) r_start[c] = int(j0 + c - i0 > 0 ? j0 + c - i0 : 0);
        if constexpr (kPairs) {
          using Pairs = AttnPairs<V>;
          for (int g = 0; g * R < nr; ++g) {
            const int nh = nr - g * R < R ? nr - g * R : R, keys = n[g * R + nh - 1];
            Pairs::round_rows(ds + g * R, nh, n + g * R, R, extent(keys), ds16 + g * R);
            Pairs::template rows<R>(h.dq + (i0 + g * R) * Dp, nh, nullptr, ds16 + g * R, (keys + 1) / 2,
                                    k_pairs + j0 / 2 * Dp, Dp);
          }
          Pairs::pack_columns(p, nr, i0, j0, nk, by_columns);
          Pairs::columns(h.dv + j0 * Dp, Dp, nk, by_columns, r_start, nr, dout_pairs + i0 / 2 * Dp);
          Pairs::pack_columns(ds, nr, i0, j0, nk, by_columns);
          Pairs::columns(h.dk + j0 * Dp, Dp, nk, by_columns, r_start, nr, q_pairs + i0 / 2 * Dp);
        } else {
          for (int g = 0; g * R < nr; ++g) {
            const int nh = nr - g * R < R ? nr - g * R : R;
            accumulate_rows(h.dq + (i0 + g * R) * Dp, Dp, nh, nullptr, ds + g * R, n + g * R, h.k + j0 * Dp);
          }
          accumulate_columns(h.dv + j0 * Dp, Dp, nk, p, r_start, nr, h.dout + i0 * Dp, Dp);
          accumulate_columns(h.dk + j0 * Dp, Dp, nk, ds, r_start, nr, h.q + i0 * Dp, Dp);
        }
      }
    }
  }
};
