// The fused attention's tile kernels for one (sequence, head), written once over a vector type V
// (W float lanes: load, store, set1, zero, add, sub, mul, div, fma) and compiled per ISA:
// attention_kernels.cpp instantiates them with AVX2 + FMA (8 lanes), attention_avx512.cpp with
// AVX-512F (16 lanes). Each output element is the fixed FMA chain of backend/attention_args.h:
// vectors run across independent outputs (keys of a score row, or the D columns of an
// accumulator), never across the terms of one sum, so every width gives the specification's bits.
// The 8-lane tile sum and exp are tmath's (exp_f32_8 = tmath::exp_f32 lane for lane).
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
  static constexpr int U = 4;                   // vectors of keys per register block (4 x W keys)
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
        for (int u = 0; u < U; ++u) V::store(&out[r][c0 + u * W], scaled ? V::mul(s, acc[r][u]) : acc[r][u]);
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

  // acc[0 .. Dp) = acc * mul (when scale_first), then acc = fma(w[c], rows[c], acc) for c < n
  // (rows stride ld). Dp is a multiple of W.
  static void accumulate(float* acc, int64_t Dp, bool scale_first, float mul, const float* w, int n, const float* rows,
                         int64_t ld) {
    for (int64_t k = 0; k < Dp; k += W) {
      Vec a = V::load(acc + k);
      if (scale_first) a = V::mul(a, V::set1(mul));
      for (int c = 0; c < n; ++c) a = V::fma(V::set1(w[c]), V::load(rows + c * ld + k), a);
      V::store(acc + k, a);
    }
  }

  // dst[c] = acc[r_start[c] .. nr) chained: dst_c = fma(w[r][c], rows[r], dst_c) for r increasing.
  static void accumulate_columns(float* dst, int64_t Dp, int nk, const float (*w)[KT], const int* r_start, int nr,
                                 const float* rows, int64_t ld) {
    for (int c = 0; c < nk; ++c) {
      if (r_start[c] >= nr) continue;
      float* d = dst + c * Dp;
      for (int64_t k = 0; k < Dp; k += W) {
        Vec a = V::load(d + k);
        for (int r = r_start[c]; r < nr; ++r) a = V::fma(V::set1(w[r][c]), V::load(rows + r * ld + k), a);
        V::store(d + k, a);
      }
    }
  }

  static void forward(const AttnHead& h) {
    const int64_t T = h.T, Dp = h.Dp, Tp = h.Tp;
    alignas(64) float s[R][KT];
    alignas(64) float p[KT];
    for (int64_t i = 0; i < T * Dp; ++i) h.out[i] = 0.0f;
    for (int64_t i0 = 0; i0 < T; i0 += R) {
      const int nr = int(T - i0 < R ? T - i0 : R);
      float m[R], l[R];
      for (int r = 0; r < R; ++r) m[r] = -__builtin_inff(), l[r] = 0.0f;
      const int64_t last_tile = (i0 + nr - 1) / KT;
      for (int64_t t = 0; t <= last_tile; ++t) {
        const int64_t j0 = t * KT;
        dots(h.q, Dp, i0, nr, h.kt, Tp, j0, h.D, true, h.scale, s);
        for (int r = 0; r < nr; ++r) {
          const int64_t i = i0 + r;
          if (j0 > i) continue;
          const int n = int(i - j0 + 1 < KT ? i - j0 + 1 : KT);
          float mt = m[r];
          for (int c = 0; c < n; ++c) mt = (s[r][c] > mt || s[r][c] != s[r][c]) ? s[r][c] : mt;
          const float corr = tmath::exp_f32(m[r] - mt);
          const __m256 vm = _mm256_set1_ps(mt);
          for (int c = 0; c < KT; c += 8) _mm256_store_ps(p + c, exp_f32_8(_mm256_sub_ps(_mm256_load_ps(&s[r][c]), vm)));
          for (int c = n; c < KT; ++c) p[c] = 0.0f;
          l[r] = l[r] * corr + tile_sum(p);
          accumulate(h.out + i * Dp, Dp, true, corr, p, n, h.v + j0 * Dp, Dp);
          m[r] = mt;
        }
      }
      for (int r = 0; r < nr; ++r) {
        float* o = h.out + (i0 + r) * Dp;
        const Vec vl = V::set1(l[r]);
        for (int64_t k = 0; k < Dp; k += W) V::store(o + k, V::div(V::load(o + k), vl));
        h.m_out[i0 + r] = m[r];
        h.l_out[i0 + r] = l[r];
      }
    }
  }

  static void backward(const AttnHead& h) {
    const int64_t T = h.T, D = h.D, Dp = h.Dp, Tp = h.Tp;
    for (int64_t i = 0; i < T; ++i) {  // delta_i = dot(dout_i, out_i)
      float a = 0.0f;
      for (int64_t d = 0; d < D; ++d) a = __builtin_fmaf(h.dout[i * Dp + d], h.o[i * Dp + d], a);
      h.delta[i] = a;
    }
    for (int64_t i = 0; i < T * Dp; ++i) h.dq[i] = 0.0f, h.dk[i] = 0.0f, h.dv[i] = 0.0f;
    alignas(64) float s[R][KT];
    alignas(64) float dp[R][KT];
    alignas(64) float p[R][KT];
    alignas(64) float ds[R][KT];
    const Vec vscale = V::set1(h.scale);
    for (int64_t j0 = 0; j0 < T; j0 += KT) {
      const int nk = int(T - j0 < KT ? T - j0 : KT);
      for (int64_t i0 = j0; i0 < T; i0 += R) {
        const int nr = int(T - i0 < R ? T - i0 : R);
        dots(h.q, Dp, i0, nr, h.kt, Tp, j0, D, true, h.scale, s);
        dots(h.dout, Dp, i0, nr, h.vt, Tp, j0, D, false, 1.0f, dp);
        for (int r = 0; r < nr; ++r) {
          const int64_t i = i0 + r;
          const int n = int(i - j0 + 1 < nk ? i - j0 + 1 : nk);
          const __m256 vm = _mm256_set1_ps(h.m[i]), vl = _mm256_set1_ps(h.l[i]);
          for (int c = 0; c < KT; c += 8)
            _mm256_store_ps(&p[r][c], _mm256_div_ps(exp_f32_8(_mm256_sub_ps(_mm256_load_ps(&s[r][c]), vm)), vl));
          const Vec vdelta = V::set1(h.delta[i]);
          for (int c = 0; c < KT; c += W)  // softmax_ds: (scale * P) * (dP - delta)
            V::store(&ds[r][c], V::mul(V::mul(vscale, V::load(&p[r][c])), V::sub(V::load(&dp[r][c]), vdelta)));
          for (int c = n; c < KT; ++c) p[r][c] = 0.0f, ds[r][c] = 0.0f;
          accumulate(h.dq + i * Dp, Dp, false, 1.0f, ds[r], n, h.k + j0 * Dp, Dp);
        }
        int r_start[KT];
        for (int c = 0; c < nk; ++c) r_start[c] = int(j0 + c - i0 > 0 ? j0 + c - i0 : 0);
        accumulate_columns(h.dv + j0 * Dp, Dp, nk, p, r_start, nr, h.dout + i0 * Dp, Dp);
        accumulate_columns(h.dk + j0 * Dp, Dp, nk, ds, r_start, nr, h.q + i0 * Dp, Dp);
      }
    }
  }
};
