// The fused attention's tile kernels for one (sequence, head), written once over a vector type V
// (W float lanes: load, store, set1, zero, add, sub, mul, div, fma, and exp_nonpositive:
// tmath::exp_f32 lane for lane for arguments <= 0 or NaN, every exp here being of a score minus a
// maximum) and compiled per ISA:
// attention_kernels.cpp instantiates them with AVX2 + FMA (8 lanes), attention_avx512.cpp with
// AVX-512F (16 lanes). Each output element is the fixed FMA chain of backend/attention_args.h:
// vectors run across independent outputs (keys of a score row, or the D columns of an
// accumulator), never across the terms of one sum, so every width gives the specification's bits.
// The tile sum is the specification's 8 lanes at every width.
//
// No includes: the including file includes everything first (immintrin.h, transformer_rows.h,
// attention_kernels.h) and then this file inside its own anonymous namespace, so that no inline
// function compiled for one ISA can be merged with another's at link time.

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

  // out[r][c] = alpha * dot(a_row(r), bt[:, j0 + c]) for r < R, c < KT: rows of `a` (stride lda)
  // starting at row i0, rows past nr repeat the last one (computed, never used); bt is [D][ldb].
  static void dots(const float* a, int64_t lda, int64_t i0, int nr, const float* bt, int64_t ldb, int64_t j0,
                   int64_t D, bool scaled, float alpha, float (*out)[KT]) {
    const float* row[R];
    for (int r = 0; r < R; ++r) row[r] = a + (i0 + (r < nr ? r : nr - 1)) * lda;
    for (int c0 = 0; c0 < KT; c0 += KC) {
      Vec acc[R][U];
      for (int r = 0; r < R; ++r)
        for (int u = 0; u < U; ++u) acc[r][u] = V::zero();
      const float* b = bt + j0 + c0;
      for (int64_t d = 0; d < D; ++d) {
        Vec kv[U];
        for (int u = 0; u < U; ++u) kv[u] = V::load(b + d * ldb + u * W);
        for (int r = 0; r < R; ++r) {
          const Vec qb = V::set1(row[r][d]);
          for (int u = 0; u < U; ++u) acc[r][u] = V::fma(qb, kv[u], acc[r][u]);
        }
      }
      const Vec s = V::set1(alpha);
      for (int r = 0; r < R; ++r)
        for (int u = 0; u < U; ++u)  // scores: scale * dot + 0 (no -0: the maxima need no order)
          V::store(&out[r][c0 + u * W], scaled ? V::add(V::mul(s, acc[r][u]), V::zero()) : acc[r][u]);
    }
  }

  // The 8-lane tile sum of the specification over KT values (zeros past the valid keys).
  static float tile_sum(const float* p) {
    __m256 lanes = _mm256_setzero_ps();
    for (int c = 0; c < KT; c += 8) lanes = _mm256_add_ps(lanes, _mm256_loadu_ps(p + c));
    alignas(32) float L[8];
    _mm256_store_ps(L, lanes);
    return ((L[0] + L[1]) + (L[2] + L[3])) + ((L[4] + L[5]) + (L[6] + L[7]));
  }

  // max(m, s_0 .. s_KT-1), NaN when any of them is NaN. Scores hold no -0 (the specification adds
  // +0), so the maximum does not depend on the order of the comparisons.
  static float tile_max(const float* s, float m) {
    __m256 mx = _mm256_set1_ps(m), nan = _mm256_cmp_ps(mx, mx, _CMP_UNORD_Q);
    for (int c = 0; c < KT; c += 8) {
      const __m256 v = _mm256_loadu_ps(s + c);
      mx = _mm256_max_ps(mx, v);
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    if (_mm256_movemask_ps(nan) != 0) return __builtin_nanf("");
    alignas(32) float x[8];
    _mm256_store_ps(x, mx);
    float r = x[0];
    for (int k = 1; k < 8; ++k) r = x[k] > r ? x[k] : r;
    return r;
  }

  // For rows r < nr: acc_r = acc_r * mul[r] (when mul is given), then acc_r = fma(w[r][c], rows[c],
  // acc_r) for c < n (rows stride ld); G vectors of columns at a time, so R * G independent chains
  // are in flight.
  template <int G>
  static void accumulate_block(float* acc, int64_t ld_acc, int nr, const float* mul, const float (*w)[KT], int n,
                               const float* rows, int64_t ld, int64_t k) {
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
  static void accumulate_row(float* acc, const float* w, int c0, int c1, const float* rows, int64_t ld, int64_t Dp) {
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
  static void column_range(float* d, int64_t Dp, const float (*w)[KT], int c, int r0, int r1, const float* rows,
                           int64_t ld) {
    if (r0 >= r1) return;
    for (int64_t k = 0; k < Dp; k += W) {
      Vec a = V::load(d + k);
      for (int r = r0; r < r1; ++r) a = V::fma(V::set1(w[r][c]), V::load(rows + r * ld + k), a);
      V::store(d + k, a);
    }
  }

  // Columns c .. c + 3 (rows of dst, stride Dp) over rows r0 .. r1 - 1, G vectors at column k.
  template <int G>
  static void columns4_block(float* dst, int64_t Dp, int64_t k, const float (*w)[KT], int c, int r0, int r1,
                             const float* rows, int64_t ld) {
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

  // Forward: blocks of RF query rows (SB register blocks of R) sweep the key tiles together, so a
  // tile's keys and values are read from the L1 cache by every register block after the first.
  static constexpr int SB = 4, RF = SB * R;

  static void forward(const AttnHead& h) {
    const int64_t T = h.T, Dp = h.Dp, Tp = h.Tp;
    alignas(64) float s[R][KT];
    alignas(64) float p[R][KT];
    for (int64_t i = 0; i < T * Dp; ++i) h.out[i] = 0.0f;
    for (int64_t f0 = 0; f0 < T; f0 += RF) {
      const int nf = int(T - f0 < RF ? T - f0 : RF);
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
          float* mb = m + b * R;
          float* lb = l + b * R;
          dots(h.q, Dp, i0, nr, h.kt, Tp, j0, h.D, true, h.scale, s);
          for (int r = 0; r < nr; ++r) {
            const int64_t i = i0 + r;
            n[r] = int(i - j0 + 1 < KT ? i - j0 + 1 : KT);
            for (int c = n[r]; c < KT; ++c) s[r][c] = -__builtin_inff();  // keys after the query
            const float mt = tile_max(s[r], mb[r]);
            corr[r] = tmath::exp_f32(mb[r] - mt);
            const Vec vm = V::set1(mt);
            // s - mt <= 0 or NaN: mt is the maximum of the tile's scores and the running maximum
            for (int c = 0; c < KT; c += W) V::store(&p[r][c], V::exp_nonpositive(V::sub(V::load(&s[r][c]), vm)));
            for (int c = n[r]; c < KT; ++c) p[r][c] = 0.0f;
            lb[r] = lb[r] * corr[r] + tile_sum(p[r]);
            mb[r] = mt;
          }
          accumulate_rows(h.out + i0 * Dp, Dp, nr, corr, p, n, h.v + j0 * Dp);
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

  // Backward: per key tile, blocks of RB query rows (two register blocks of R): their scores,
  // dP, P and dS; dQ's chains continue row by row over the tile's keys, dK's and dV's over the
  // block's rows (RB independent terms per column in flight).
  static constexpr int RB = 2 * R;

  static void backward(const AttnHead& h) {
    const int64_t T = h.T, D = h.D, Dp = h.Dp, Tp = h.Tp;
    for (int64_t i = 0; i < T; ++i) {  // delta_i = dot(dout_i, out_i)
      float a = 0.0f;
      for (int64_t d = 0; d < D; ++d) a = __builtin_fmaf(h.dout[i * Dp + d], h.o[i * Dp + d], a);
      h.delta[i] = a;
    }
    for (int64_t i = 0; i < T * Dp; ++i) h.dq[i] = 0.0f, h.dk[i] = 0.0f, h.dv[i] = 0.0f;
    alignas(64) float s[RB][KT];
    alignas(64) float dp[RB][KT];
    alignas(64) float p[RB][KT];
    alignas(64) float ds[RB][KT];
    const Vec vscale = V::set1(h.scale);
    for (int64_t j0 = 0; j0 < T; j0 += KT) {
      const int nk = int(T - j0 < KT ? T - j0 : KT);
      for (int64_t i0 = j0; i0 < T; i0 += RB) {
        const int nr = int(T - i0 < RB ? T - i0 : RB);
        int n[RB];
        for (int half = 0; half * R < nr; ++half) {
          const int64_t ih = i0 + half * R;
          const int nh = nr - half * R < R ? nr - half * R : R;
          dots(h.q, Dp, ih, nh, h.kt, Tp, j0, D, true, h.scale, s + half * R);
          dots(h.dout, Dp, ih, nh, h.vt, Tp, j0, D, false, 1.0f, dp + half * R);
        }
        for (int r = 0; r < nr; ++r) {
          const int64_t i = i0 + r;
          n[r] = int(i - j0 + 1 < nk ? i - j0 + 1 : nk);
          const Vec vm = V::set1(h.m[i]), vl = V::set1(h.l[i]);
          // s - m <= 0 or NaN for the keys up to the query (the forward's maximum of the same
          // scores' bits); the later columns are zeroed below.
          for (int c = 0; c < KT; c += W)
            V::store(&p[r][c], V::div(V::exp_nonpositive(V::sub(V::load(&s[r][c]), vm)), vl));
          const Vec vdelta = V::set1(h.delta[i]);
          for (int c = 0; c < KT; c += W)  // softmax_ds: (scale * P) * (dP - delta)
            V::store(&ds[r][c], V::mul(V::mul(vscale, V::load(&p[r][c])), V::sub(V::load(&dp[r][c]), vdelta)));
          for (int c = n[r]; c < KT; ++c) p[r][c] = 0.0f, ds[r][c] = 0.0f;
        }
        for (int half = 0; half * R < nr; ++half) {
          const int nh = nr - half * R < R ? nr - half * R : R;
          accumulate_rows(h.dq + (i0 + half * R) * Dp, Dp, nh, nullptr, ds + half * R, n + half * R, h.k + j0 * Dp);
        }
        int r_start[KT];
        for (int c = 0; c < nk; ++c) r_start[c] = int(j0 + c - i0 > 0 ? j0 + c - i0 : 0);
        accumulate_columns(h.dv + j0 * Dp, Dp, nk, p, r_start, nr, h.dout + i0 * Dp, Dp);
        accumulate_columns(h.dk + j0 * Dp, Dp, nk, ds, r_start, nr, h.q + i0 * Dp, Dp);
      }
    }
  }
};
