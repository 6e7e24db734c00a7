// tmath's exp_f32 (for arguments <= 0), gelu_tanh and gelu_tanh_grad (transformer_args.h) on a
// vector of lanes, written once for the CPU kernels' vector types: V8 (AVX2, transformer_rows.h)
// and V16 (AVX-512F, exp_avx512.h). Operation for operation the scalar functions (no contraction:
// the including files turn it off; the scalar fmaf as V::fma; the same constants; branches as
// blends), so every vector type gives the scalar bits. V provides Vec, IVec, Mask and: set1, add,
// sub, mul, div, fma (a * b + c, rounded once), max, cvtt (float to int32,
// toward zero), cvt (int32 to float), iset1, iadd, isub, srai, slli, as_float (bits), ge, lt, eq,
// unord (-> Mask), blend(m, a, b) (m ? b : a), neg_abs (the sign bit set), and kScalef: whether
// it has trunc (toward zero, in the float) and scalef (a * 2^floor(b), rounded once) for exp_poly.
// No include guard: included inside each user's namespace, after the user's target pragma, so
// the AVX-512 instances are compiled for AVX-512 and stay in that file.

// exp_f32's reduction, polynomial and scaling by 2^k for lanes whose rounded x / ln 2 (kin, before
// truncation) lies in [-200, 200]; the callers replace the lanes exp_f32 treats apart.
// Where V::kScalef (AVX-512), k is truncated in the float (VRNDSCALEPS) and e * 2^k rounded once
// by VSCALEFPS: nine instructions fewer for the same bits. exp_f32's (e * 2^k1) * 2^k2 is that
// value, since its first product is exact (e * 2^k1 is normal for k1 >= -100) and its second
// rounds once. A kin in (-1, 0) truncates to -0 there, not +0, which changes no result: x - (-0) c
// is x except at x = -0 (then r is +0 instead of -0), and e is 1 for either zero. Every non-positive
// float and NaN gives exp_f32's bits on both paths (tests/unit/test_ops_transformer.cpp).
template <typename V>
inline typename V::Vec exp_poly(typename V::Vec x, typename V::Vec kin) {
  using Vec = typename V::Vec;
  using IVec = typename V::IVec;
  IVec k{};
  Vec fk;
  if constexpr (V::kScalef) {
    fk = V::trunc(kin);
  } else {
    k = V::cvtt(kin);
    fk = V::cvt(k);
  }
  Vec r = V::sub(x, V::mul(fk, V::set1(0.693359375f)));
  r = V::fma(fk, V::set1(2.12194440e-4f), r);
  const Vec r2 = V::mul(r, r);
  Vec p = V::set1(1.9875691500e-4f);
  p = V::fma(p, r, V::set1(1.3981999507e-3f));
  p = V::fma(p, r, V::set1(8.3334519073e-3f));
  p = V::fma(p, r, V::set1(4.1665795894e-2f));
  p = V::fma(p, r, V::set1(1.6666665459e-1f));
  p = V::fma(p, r, V::set1(5.0000001201e-1f));
  const Vec e = V::add(V::fma(p, r2, r), V::set1(1.0f));
  if constexpr (V::kScalef) {
    return V::scalef(e, fk);
  } else {
    // k1 = k / 2 truncated toward zero, k2 = k - k1; 2^k1 and 2^k2 from their exponent bits.
    const IVec k1 = V::srai(V::isub(k, V::srai(k, 31)), 1);
    const IVec k2 = V::isub(k, k1);
    const IVec bias = V::iset1(127);
    const Vec p1 = V::as_float(V::slli(V::iadd(k1, bias), 23));
    const Vec p2 = V::as_float(V::slli(V::iadd(k2, bias), 23));
    return V::mul(V::mul(e, p1), p2);
  }
}

// Lanes below -104 give 0, NaN lanes x + x.
template <typename V>
inline typename V::Vec exp_low_nan(typename V::Vec x, typename V::Vec y) {
  y = V::blend(V::lt(x, V::set1(-104.0f)), y, V::set1(0.0f));
  return V::blend(V::unord(x, x), y, V::add(x, x));
}

// tmath::exp_f32 where every lane is <= 0 or NaN (all the vector kernels need: GELU's exp(-|2u|),
// the softmax's and attention's exp(score - max)): exp_f32's steps without its overflow branch,
// which no such lane takes, and rounding kf - 0.5 toward zero gives exp_f32's k also at kf = +-0
// (both 0). The same bits.
template <typename V>
inline typename V::Vec exp_nonpositive_v(typename V::Vec x) {
  const typename V::Vec kf = V::mul(x, V::set1(1.44269504088896341f));
  const typename V::Vec kin = V::max(V::add(kf, V::set1(-0.5f)), V::set1(-200.0f));
  return exp_low_nan<V>(x, exp_poly<V>(x, kin));
}

template <typename V>
inline typename V::Vec gelu_2u_v(typename V::Vec x) {
  return V::mul(x, V::fma(V::set1(tmath::kGelu2KC), V::mul(x, x), V::set1(tmath::kGelu2K)));
}

// t = exp(-|2u|), and the sign test of 2u. -|2u| is computed by setting the sign bit: the
// specification's bits, except the sign of a NaN and of a zero (exp gives 1 for either zero).
template <typename V>
inline typename V::Vec gelu_t_v(typename V::Vec u2, typename V::Mask* u_ge0) {
  *u_ge0 = V::ge(u2, V::set1(0.0f));
  return exp_nonpositive_v<V>(V::neg_abs(u2));
}

// s = (2u >= 0 ? 1 : t) / (1 + t): one division for the specification's two branches.
template <typename V>
inline typename V::Vec gelu_tanh_v(typename V::Vec x) {
  typename V::Mask ge0;
  const typename V::Vec t = gelu_t_v<V>(gelu_2u_v<V>(x), &ge0), one = V::set1(1.0f);
  return V::mul(x, V::div(V::blend(ge0, t, one), V::add(one, t)));
}

template <typename V>
inline typename V::Vec gelu_tanh_grad_v(typename V::Vec x) {
  using Vec = typename V::Vec;
  typename V::Mask ge0;
  const Vec t = gelu_t_v<V>(gelu_2u_v<V>(x), &ge0), one = V::set1(1.0f);
  const Vec inv = V::div(one, V::add(one, t));
  const Vec tinv = V::mul(t, inv);
  const Vec s = V::blend(ge0, tinv, inv);
  const Vec oms = V::blend(ge0, inv, tinv);  // 1 - s
  const Vec ss = V::mul(s, oms);
  const Vec du2 = V::fma(V::set1(tmath::kGelu6KC), V::mul(x, x), V::set1(tmath::kGelu2K));
  const Vec g = V::fma(V::mul(x, ss), du2, s);
  return V::blend(V::eq(ss, V::set1(0.0f)), g, s);  // where s (1 - s) is 0, gelu' = s
}
