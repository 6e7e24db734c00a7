// The fused attention's BF16 products (backend/attention_args.h, the CPU's second exception to the
// specification): P and dS rounded to BF16, and P V, dQ, dK and dV as chains of VDPBF16PS over pairs
// of their terms, as the score and dP products already are. attention_tiles.h runs them in its
// forward and backward where a kernel set has them (V::kBf16Dots) and a head asks for them
// (AttnHead::bf16_products); only the kernel set with AVX-512-BF16 instantiates them.
//
// An output element's chain: acc = dot_pairs(acc, (w_2t, w_2t+1), (x_2t, x_2t+1)) for t = 0, 1, ...
// in order, one lane of VDPBF16PS per pair (fma(w_2t, x_2t, fma(w_2t+1, x_2t+1, acc)) for normal
// values; the instruction flushes subnormal inputs and results to zero). A term past the last of an
// element's chain (its pair's partner past a row's keys, or a row before a key's query) enters with
// a weight of +0, which changes nothing but a zero's sign or a subnormal accumulator (flushed): the
// pairs each chain runs depend on the shape alone, so the bits do not depend on the thread count.
// The heads that run them have every input finite and normal or zero (bf16_dots_allowed), so a
// weight of 0 never meets an inf or NaN.
//
// Layouts: a row-paired operand is [ceil(T/2)][Dp] 32-bit words, word (t, d) holding row 2t's
// column d in its low half and row 2t + 1's in its high half (0 past T): the dQ, dK, dV and P V
// products' right-hand operands, paired along their sums. Weights paired along a row (P or dS for
// P V and dQ, over keys) are the row rounded to BF16 in order, read as words at even columns;
// weights paired along a column (for dK and dV, over queries) are packed [row pair][column].
//
// No includes: attention_tiles.h includes this file where it is itself included (an anonymous
// namespace compiled for one ISA), after defining AMP_TILE_LOOP.

template <class V>
struct AttnPairs {
  using Vec = typename V::Vec;
  static constexpr int W = V::W;
  static constexpr int KT = int(kAttnKeyTile);

  // Zero-padded row pairs of rows16 [T][Dp] (BF16 bits) into pairs [ceil(T/2)][Dp].
  static void pair_rows(const uint16_t* rows16, int64_t T, int64_t Dp, uint32_t* pairs) {
    const __m256i zero = _mm256_setzero_si256();
    for (int64_t t = 0; 2 * t < T; ++t) {
      const uint16_t* lo = rows16 + 2 * t * Dp;
      const uint16_t* hi = 2 * t + 1 < T ? lo + Dp : nullptr;
      for (int64_t d = 0; d < Dp; d += W) {
        const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo + d));
        const __m256i b = hi ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi + d)) : zero;
        V::store_words(pairs + t * Dp + d, V::pair_words(a, b));
      }
    }
  }

  // Row r < rows of w rounded to BF16 into w16[r] over columns [0, kc), the columns c >= n[r] (or
  // every column of a row r >= nr) as +0.
  static void round_rows(const float (*w)[KT], int nr, const int* n, int rows, int kc, uint16_t (*w16)[KT]) {
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < kc; c += W) {
        const int keep = r < nr ? n[r] - c : 0;
        const __m256i rounded = V::round16(V::first_lanes(V::load(&w[r][c]), keep));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(&w16[r][c]), rounded);
      }
  }

  // The weights of rows i0 .. i0 + nr - 1 (block rows r) against keys j0 + c, c < nk, paired along
  // the column: wq[t][c] = (w[2t][c], w[2t + 1][c]) rounded to BF16, each +0 where its row is past
  // nr or precedes the key (i0 + r < j0 + c).
  static void pack_columns(const float (*w)[KT], int nr, int64_t i0, int64_t j0, int nk, uint32_t (*wq)[KT]) {
    const int kc = (nk + W - 1) / W * W;
    for (int t = 0; 2 * t < nr; ++t)
      for (int c = 0; c < kc; c += W) {
        const int r = 2 * t;
        const int64_t seen = i0 + r - j0 + 1;  // keys row r sees, before the tile's end
        const int64_t lo_keys = seen < nk ? seen : nk, hi_keys = seen + 1 < nk ? seen + 1 : nk;
        const __m256i a = V::round16(V::first_lanes(V::load(&w[r][c]), int(lo_keys - c)));
        const __m256i b =
            r + 1 < nr ? V::round16(V::first_lanes(V::load(&w[r + 1][c]), int(hi_keys - c))) : _mm256_setzero_si256();
        V::store_words(&wq[t][c], V::pair_words(a, b));
      }
  }

  // acc rows r < nr (stride ld_acc, columns k .. k + G*W): acc_r *= mul[r] (when given), then the
  // pairs t < np of row r's weights w16[r] (over keys) against pairs [t][Dp] (rows of the keys).
  // Every one of the R rows' weights must be set (round_rows: +0 past a row's keys).
  template <int R, int G>
  AMP_TILE_LOOP static void rows_block(float* acc, int64_t ld_acc, int nr, const float* mul, const uint16_t (*w16)[KT],
                                       int np, const uint32_t* pairs, int64_t Dp, int64_t k) {
    Vec a[R][G];
    for (int r = 0; r < R; ++r)
      for (int g = 0; g < G; ++g) {
        a[r][g] = r < nr ? V::load(acc + r * ld_acc + k + g * W) : V::zero();
        if (mul && r < nr) a[r][g] = V::mul(a[r][g], V::set1(mul[r]));
      }
    for (int t = 0; t < np; ++t) {
      typename V::Words x[G];
      for (int g = 0; g < G; ++g) x[g] = V::load_words(pairs + t * Dp + k + g * W);
      for (int r = 0; r < R; ++r) {
        const typename V::Words wb = V::set1_pair(&w16[r][2 * t]);
        for (int g = 0; g < G; ++g) a[r][g] = V::dot_pairs(a[r][g], wb, x[g]);
      }
    }
    for (int r = 0; r < nr; ++r)
      for (int g = 0; g < G; ++g) V::store(acc + r * ld_acc + k + g * W, a[r][g]);
  }

  template <int R>
  static void rows(float* acc, int nr, const float* mul, const uint16_t (*w16)[KT], int np, const uint32_t* pairs,
                   int64_t Dp) {
    int64_t k = 0;
    for (; k + 4 * W <= Dp; k += 4 * W) rows_block<R, 4>(acc, Dp, nr, mul, w16, np, pairs, Dp, k);
    for (; k + 2 * W <= Dp; k += 2 * W) rows_block<R, 2>(acc, Dp, nr, mul, w16, np, pairs, Dp, k);
    for (; k < Dp; k += W) rows_block<R, 1>(acc, Dp, nr, mul, w16, np, pairs, Dp, k);
  }

  // dst rows c .. c + X - 1 (keys; stride Dp, columns k .. k + G*W) over row pairs t0 .. t1 - 1 of
  // the block: wq[t][c + x] against pairs [t][Dp] (the block's rows paired).
  template <int X, int G>
  AMP_TILE_LOOP static void columns_block(float* dst, int64_t Dp, int64_t k, const uint32_t (*wq)[KT], int c, int t0,
                                          int t1, const uint32_t* pairs) {
    Vec a[X][G];
    for (int x = 0; x < X; ++x)
      for (int g = 0; g < G; ++g) a[x][g] = V::load(dst + x * Dp + k + g * W);
    for (int t = t0; t < t1; ++t) {
      typename V::Words y[G];
      for (int g = 0; g < G; ++g) y[g] = V::load_words(pairs + t * Dp + k + g * W);
      for (int x = 0; x < X; ++x) {
        const typename V::Words wb = V::set1_pair(reinterpret_cast<const uint16_t*>(&wq[t][c + x]));
        for (int g = 0; g < G; ++g) a[x][g] = V::dot_pairs(a[x][g], wb, y[g]);
      }
    }
    for (int x = 0; x < X; ++x)
      for (int g = 0; g < G; ++g) V::store(dst + x * Dp + k + g * W, a[x][g]);
  }

  template <int X>
  static void columns_group(float* dst, int64_t Dp, const uint32_t (*wq)[KT], int c, int t0, int t1,
                            const uint32_t* pairs) {
    int64_t k = 0;
    for (; k + 4 * W <= Dp; k += 4 * W) columns_block<X, 4>(dst, Dp, k, wq, c, t0, t1, pairs);
    for (; k + 2 * W <= Dp; k += 2 * W) columns_block<X, 2>(dst, Dp, k, wq, c, t0, t1, pairs);
    for (; k < Dp; k += W) columns_block<X, 1>(dst, Dp, k, wq, c, t0, t1, pairs);
  }

  // The keys c < nk of a tile (dst rows, stride Dp) over the block's nr rows: key c's chain from
  // the row pair of its first row r_start[c] (the pairs before hold only +0 weights for it).
  static void columns(float* dst, int64_t Dp, int nk, const uint32_t (*wq)[KT], const int* r_start, int nr,
                      const uint32_t* pairs) {
    const int t1 = (nr + 1) / 2;
    int c = 0;
    for (; c + 4 <= nk; c += 4) {
      const int t0 = r_start[c] / 2;  // the group's first (r_start grows with c)
      if (t0 < t1) columns_group<4>(dst + c * Dp, Dp, wq, c, t0, t1, pairs);
    }
    for (; c < nk; ++c) {
      const int t0 = r_start[c] / 2;
      if (t0 < t1) columns_group<1>(dst + c * Dp, Dp, wq, c, t0, t1, pairs);
    }
  }
};
