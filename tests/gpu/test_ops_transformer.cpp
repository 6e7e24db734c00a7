// The transformer ops on the device against their CPU twins (amp::cpu::CpuOps), which
// tests/unit/test_ops_transformer.cpp checks against double references. The twins share every
// per-element function and reduction order (backend/transformer_args.h), so the comparison asks
// for the same bits (NaN payloads aside), after a tolerance check that says how far apart differing
// results are (FP32: 4 ulp, 16-bit: one ulp of the output). Also: repeated and invalid tokens and a
// GPT-2 vocabulary for the embedding's sort, the reserve contract, two runs giving the same bits,
// and a captured step of every op replaying the eager bits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "../unit/attention_ref.h"
#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "core/rng.h"
#include "device_raw.h"

using namespace amp;
using namespace gpu_test;
using ops_ref::Raw;

namespace {

const DType kTypes[] = {DType::F32, DType::F16, DType::BF16};

Raw random_raw(DType t, size_t n, uint64_t seed, double scale = 1.0, double offset = 0.0) {
  Raw r(t, n);
  ops_ref::fill_random(r, seed, scale);
  if (offset != 0.0)
    for (size_t i = 0; i < n; ++i) {
      r.set(i, float(offset + r.get(i)));
      if (r.get(i) == 0.0f) r.set(i, float(offset));
    }
  return r;
}

Raw sentinel(DType t, size_t n) {
  Raw r(t, n);
  r.fill_bits(ops_ref::sentinel_bits(t));
  return r;
}

// Tokens: a frequent token at about half the positions, the rest uniform over the vocabulary.
std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed, int32_t frequent) {
  Rng rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& v : t) v = rng.uniform() < 0.5 ? frequent : int32_t(rng.below(uint64_t(vocab)));
  return t;
}

}  // namespace

TEST_CASE("cuda tops layernorm forward and backward: bit-identical to the CPU twin", "[.cuda][tops]") {
  auto dev = make_device();
  cpu::CpuOps cpu_ops;
  struct Shape {
    int64_t rows, C;
  };
  // 1000 and 1300 rows: two and three segments of row_sum's order (dgamma/dbeta folded).
  const Shape shapes[] = {{1, 1}, {7, 33}, {130, 768}, {64, 1600}, {1000, 5}, {1300, 768}};
  uint64_t seed = 100;
  for (const Shape& sh : shapes)
    for (DType t : kTypes)
      for (int acc = 0; acc < 4; ++acc) {
        const bool acc_dx = acc & 1, acc_dp = acc & 2;
        const int64_t rows = sh.rows, C = sh.C;
        INFO("rows " << rows << " C " << C << " " << dtype_name(t) << " accumulate dx " << acc_dx << " dparams "
                     << acc_dp);
        const Raw x = random_raw(t, size_t(rows * C), ++seed, 2.0, 1.5);
        const Raw g = random_raw(t, size_t(C), ++seed, 0.5, 1.0), b = random_raw(t, size_t(C), ++seed, 0.5);
        const Raw dy = random_raw(t, size_t(rows * C), ++seed);
        const Raw dx0 = acc_dx ? random_raw(t, size_t(rows * C), ++seed) : sentinel(t, size_t(rows * C));
        const Raw dg0 = acc_dp ? random_raw(t, size_t(C), ++seed) : sentinel(t, size_t(C));
        const Raw db0 = acc_dp ? random_raw(t, size_t(C), ++seed) : sentinel(t, size_t(C));
        // CPU
        Raw y = sentinel(t, size_t(rows * C)), mean(DType::F32, size_t(rows)), rstd(DType::F32, size_t(rows));
        LayerNormArgs f;
        f.rows = rows, f.C = C, f.type = t, f.x = x.data(), f.gamma = g.data(), f.beta = b.data(), f.y = y.data();
        f.mean = static_cast<float*>(mean.data()), f.rstd = static_cast<float*>(rstd.data());
        cpu_ops.layernorm_forward(f);
        Raw dx = dx0, dg = dg0, db = db0;
        LayerNormBackwardArgs bw;
        bw.rows = rows, bw.C = C, bw.type = t, bw.dy = dy.data(), bw.x = x.data(), bw.gamma = g.data();
        bw.mean = static_cast<const float*>(mean.data()), bw.rstd = static_cast<const float*>(rstd.data());
        bw.dx = dx.data(), bw.accumulate_dx = acc_dx, bw.dgamma = dg.data(), bw.dbeta = db.data();
        bw.accumulate_dparams = acc_dp;
        cpu_ops.layernorm_backward(bw);
        // GPU, from the same inputs (its own statistics)
        Dev gx(*dev, x), gg(*dev, g), gb(*dev, b), gy(*dev, sentinel(t, size_t(rows * C))), gdy(*dev, dy), gdx(*dev, dx0), gdg(*dev, dg0), gdb(*dev, db0);
        Dev gmean(*dev, Raw(DType::F32, size_t(rows))), grstd(*dev, Raw(DType::F32, size_t(rows)));
        LayerNormArgs df = f;
        df.x = gx.get(), df.gamma = gg.get(), df.beta = gb.get(), df.y = gy.get();
        df.mean = gmean.as<float>(), df.rstd = grstd.as<float>();
        dev->ops().layernorm_forward(df);
        LayerNormBackwardArgs db_ = bw;
        db_.dy = gdy.get(), db_.x = gx.get(), db_.gamma = gg.get(), db_.mean = gmean.as<float>();
        db_.rstd = grstd.as<float>(), db_.dx = gdx.get(), db_.dgamma = gdg.get(), db_.dbeta = gdb.get();
        dev->ops().layernorm_backward(db_);
        TWINS_REQUIRE_SAME(gy.read(t), y, "y");
        TWINS_REQUIRE_SAME(gmean.read(DType::F32), mean, "mean");
        TWINS_REQUIRE_SAME(grstd.read(DType::F32), rstd, "rstd");
        TWINS_REQUIRE_SAME(gdx.read(t), dx, "dx");
        TWINS_REQUIRE_SAME(gdg.read(t), dg, "dgamma");
        TWINS_REQUIRE_SAME(gdb.read(t), db, "dbeta");
        // In place on the device: y over x.
        Dev gxi(*dev, x);
        LayerNormArgs di = df;
        di.x = gxi.get(), di.y = gxi.get(), di.mean = nullptr, di.rstd = nullptr;
        dev->ops().layernorm_forward(di);
        TWINS_REQUIRE_SAME(gxi.read(t), y, "y in place");
      }
}

TEST_CASE("cuda tops causal softmax forward and backward: bit-identical to the CPU twin", "[.cuda][tops]") {
  auto dev = make_device();
  cpu::CpuOps cpu_ops;
  uint64_t seed = 200;
  for (int64_t T : {1, 31, 64, 200})
    for (DType st : kTypes)
      for (DType pt : kTypes)
        for (DType dst : kTypes) {
          const int64_t batch = 3;
          const float scale = 0.125f;
          const DType dpt = st;  // dP in the scores' dtype: every dtype appears in each role
          INFO("T " << T << " s " << dtype_name(st) << " p " << dtype_name(pt) << " ds " << dtype_name(dst));
          const size_t n = size_t(batch * T * T);
          Raw s = random_raw(st, n, ++seed, 8.0), dp = random_raw(dpt, n, ++seed);
          for (int64_t row = 0; row < batch * T; ++row)
            for (int64_t j = row % T + 1; j < T; ++j) {  // never read
              s.set_bits(size_t(row * T + j), ops_ref::sentinel_bits(st));
              dp.set_bits(size_t(row * T + j), ops_ref::sentinel_bits(dpt));
            }
          Raw p = sentinel(pt, n), ds = sentinel(dst, n);
          cpu_ops.causal_softmax_forward(CausalSoftmaxArgs{batch, T, scale, s.data(), st, p.data(), pt});
          cpu_ops.causal_softmax_backward(
              CausalSoftmaxBackwardArgs{batch, T, scale, p.data(), pt, dp.data(), dpt, ds.data(), dst});
          Dev gs(*dev, s), gp(*dev, sentinel(pt, n)), gdp(*dev, dp), gds(*dev, sentinel(dst, n));
          dev->ops().causal_softmax_forward(CausalSoftmaxArgs{batch, T, scale, gs.get(), st, gp.get(), pt});
          dev->ops().causal_softmax_backward(
              CausalSoftmaxBackwardArgs{batch, T, scale, gp.get(), pt, gdp.get(), dpt, gds.get(), dst});
          TWINS_REQUIRE_SAME(gp.read(pt), p, "P");
          TWINS_REQUIRE_SAME(gds.read(dst), ds, "dS");
          if (st == pt && dpt == dst) {  // in place: P over S, dS over dP
            Dev gsi(*dev, s), gdpi(*dev, dp);
            dev->ops().causal_softmax_forward(CausalSoftmaxArgs{batch, T, scale, gsi.get(), st, gsi.get(), pt});
            dev->ops().causal_softmax_backward(
                CausalSoftmaxBackwardArgs{batch, T, scale, gp.get(), pt, gdpi.get(), dpt, gdpi.get(), dst});
            TWINS_REQUIRE_SAME(gsi.read(pt), p, "P in place");
            TWINS_REQUIRE_SAME(gdpi.read(dst), ds, "dS in place");
          }
          if (dst == DType::F32 && T > 1) {  // q_rows: the last rows of each matrix (sampling's new tokens)
            const int64_t Tq = std::min<int64_t>(3, T - 1);
            Raw sq(st, size_t(batch * Tq * T));
            for (int64_t b = 0; b < batch; ++b)
              for (int64_t e = 0; e < Tq * T; ++e) sq.set_bits(size_t(b * Tq * T + e), s.bits(size_t((b * T + T - Tq) * T + e)));
            Raw pq = sentinel(pt, size_t(batch * Tq * T));
            CausalSoftmaxArgs a{batch, T, scale, sq.data(), st, pq.data(), pt};
            a.q_rows = Tq;
            cpu_ops.causal_softmax_forward(a);
            Dev gsq(*dev, sq), gpq(*dev, sentinel(pt, size_t(batch * Tq * T)));
            a.s = gsq.get(), a.p = gpq.get();
            dev->ops().causal_softmax_forward(a);
            TWINS_REQUIRE_SAME(gpq.read(pt), pq, "P of the last q_rows rows");
          }
        }
}

TEST_CASE("cuda tops fused attention forward and backward: every path against float64, the exact one bit-identical to the CPU twin",
          "[.cuda][tops][attention]") {
  // Every path the device has (attention_paths) is checked against a float64 reference within the
  // rounding of P and dS to the dtype (attention_ref::check_bound); the specification's path, which
  // transcribes backend/attention_args.h's chains (tmath::exp_f32, explicit FMAs) as the CPU twin
  // does, must also give the CPU twin's out, statistics and gradients bit for bit. Lengths across
  // the 64-key tile, head dimensions that are and are not multiples of the CPU's vector width and
  // 64 (the tensor cores' shape).
  auto dev = make_device();
  cpu::CpuOps cpu_ops;
  cpu_ops.set_exact_attention(true);  // the twin of the device's exact path
  struct Shape {
    int64_t B, T, H, D;
  };
  const Shape shapes[] = {{1, 1, 1, 1}, {2, 37, 3, 8}, {1, 64, 2, 64}, {2, 130, 2, 20}, {1, 257, 1, 64}, {2, 75, 3, 64}};
  uint64_t seed = 500;
  for (const Shape& sh : shapes)
    for (DType t : kTypes) {
      const size_t C = size_t(sh.H * sh.D), rows = size_t(sh.B * sh.T), stats = size_t(sh.B * sh.H * sh.T);
      const float scale = 1.0f / std::sqrt(float(sh.D));
      const Raw qkv = random_raw(t, rows * 3 * C, ++seed, 1.5), dout = random_raw(t, rows * C, ++seed);
      Raw out = sentinel(t, rows * C), dqkv = sentinel(t, rows * 3 * C);
      Raw m = sentinel(DType::F32, stats), l = sentinel(DType::F32, stats), delta = sentinel(DType::F32, stats);
      AttentionArgs a{sh.B, sh.T, sh.H, sh.D, scale, t, qkv.data(), out.data(), static_cast<float*>(m.data()),
                      static_cast<float*>(l.data())};
      cpu_ops.attention_forward(a);
      AttentionBackwardArgs g{sh.B, sh.T, sh.H, sh.D, scale, t, qkv.data(), out.data(), dout.data(),
                              static_cast<const float*>(m.data()), static_cast<const float*>(l.data()),
                              static_cast<float*>(delta.data()), dqkv.data()};
      cpu_ops.attention_backward(g);
      const std::vector<AttentionPath> paths = attention_paths();
      for (size_t path_i = 0; path_i < paths.size(); ++path_i) {
        select_attention_path(*dev, path_i);
        INFO("B " << sh.B << " T " << sh.T << " H " << sh.H << " D " << sh.D << " " << dtype_name(t)
                  << ", device attention path: " << paths[path_i].name);
        Dev gqkv(*dev, qkv), gdout(*dev, dout), gout(*dev, sentinel(t, rows * C)),
            gdqkv(*dev, sentinel(t, rows * 3 * C));
        Dev gm(*dev, sentinel(DType::F32, stats)), gl(*dev, sentinel(DType::F32, stats)),
            gdelta(*dev, sentinel(DType::F32, stats));
        dev->ops().attention_forward(AttentionArgs{sh.B, sh.T, sh.H, sh.D, scale, t, gqkv.get(), gout.get(),
                                                   gm.as<float>(), gl.as<float>()});
        dev->ops().attention_backward(AttentionBackwardArgs{sh.B, sh.T, sh.H, sh.D, scale, t, gqkv.get(),
                                                            gout.get(), gdout.get(), gm.as<float>(), gl.as<float>(),
                                                            gdelta.as<float>(), gdqkv.get()});
        const Raw dev_out = gout.read(t), dev_dqkv = gdqkv.read(t), dev_l = gl.read(DType::F32);
        attention_ref::check_bound(sh.B, sh.T, sh.H, sh.D, scale, qkv, dout, dev_out, dev_dqkv);
        for (size_t i = 0; i < stats; ++i) REQUIRE(dev_l.get(i) >= 1.0f);  // every row's sum written
        if (!paths[path_i].exact) continue;
        TWINS_REQUIRE_SAME(dev_out, out, "out");
        TWINS_REQUIRE_SAME(gm.read(DType::F32), m, "row_max");
        TWINS_REQUIRE_SAME(dev_l, l, "row_sum");
        TWINS_REQUIRE_SAME(gdelta.read(DType::F32), delta, "delta");
        TWINS_REQUIRE_SAME(dev_dqkv, dqkv, "dqkv");
      }
      select_attention_path(*dev, 0);
    }
}

TEST_CASE("cuda tops gelu_tanh forward and backward: bit-identical to the CPU twin, special values", "[.cuda][tops]") {
  auto dev = make_device();
  cpu::CpuOps cpu_ops;
  uint64_t seed = 300;
  for (int64_t n : {1, 7, 4099, 100003})
    for (DType t : kTypes)
      for (int offset : {0, 1}) {  // offset 1: the unvectorized path
        INFO("n " << n << " " << dtype_name(t) << " offset " << offset);
        Raw x = random_raw(t, size_t(n + offset), ++seed, 3.0), dy = random_raw(t, size_t(n + offset), ++seed);
        const float specials[] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 12.0f, -12.0f, 1e4f, -1e4f, 1e-20f};
        for (size_t k = 0; k < sizeof specials / sizeof specials[0] && offset + k < x.size(); ++k)
          x.set(offset + k, specials[k]);
        const auto off = [&](void* p) { return static_cast<char*>(p) + offset * dtype_size(t); };
        Raw y = sentinel(t, size_t(n + offset)), dx = sentinel(t, size_t(n + offset));
        cpu_ops.gelu_tanh_forward(GeluArgs{off(x.data()), off(y.data()), t, n});
        cpu_ops.gelu_tanh_backward(GeluBackwardArgs{off(x.data()), off(dy.data()), off(dx.data()), t, n});
        Dev gx(*dev, x), gdy(*dev, dy), gy(*dev, sentinel(t, size_t(n + offset))), gdx(*dev, sentinel(t, size_t(n + offset)));
        dev->ops().activation_forward(Activation::GeluTanh, Tensor{off(gx.get()), t, 1, size_t(n)}, Tensor{off(gy.get()), t, 1, size_t(n)});
        dev->ops().activation_backward(Activation::GeluTanh, Tensor{off(gx.get()), t, 1, size_t(n)}, Tensor{off(gdy.get()), t, 1, size_t(n)}, Tensor{off(gdx.get()), t, 1, size_t(n)});
        // Special values make NaN and inf: same_value accepts NaN for NaN, and inf must match.
        const Raw ry = gy.read(t), rdx = gdx.read(t);
        size_t differ = 0;
        for (size_t i = 0; i < y.size(); ++i)
          if (!ops_ref::same_value(ry, i, y, i) || !ops_ref::same_value(rdx, i, dx, i)) {
            if (differ++ < 5) {  // the first few, each with its values
              INFO("element " << i << " x " << x.get(i) << ": device y " << ry.get(i) << " dx " << rdx.get(i)
                              << ", cpu y " << y.get(i) << " dx " << dx.get(i));
              CHECK(false);
            }
          }
        REQUIRE(differ == 0);
        // In place on the device.
        Dev gxi(*dev, x), gdyi(*dev, dy);
        dev->ops().activation_forward(Activation::GeluTanh, Tensor{off(gxi.get()), t, 1, size_t(n)}, Tensor{off(gxi.get()), t, 1, size_t(n)});
        dev->ops().activation_backward(Activation::GeluTanh, Tensor{off(gx.get()), t, 1, size_t(n)}, Tensor{off(gdyi.get()), t, 1, size_t(n)}, Tensor{off(gdyi.get()), t, 1, size_t(n)});
        const Raw xi = gxi.read(t), dyi = gdyi.read(t);
        for (size_t i = size_t(offset); i < y.size(); ++i)
          REQUIRE((ops_ref::same_value(xi, i, y, i) && ops_ref::same_value(dyi, i, dx, i)));
      }
}

TEST_CASE("cuda tops embedding forward and backward: repeated and invalid tokens, GPT-2 vocabulary", "[.cuda][tops]") {
  struct Case {
    int64_t B, T, C, V, P;
    bool one_token;  // every position the same token
  };
  const Case cases[] = {{4, 64, 300, 11, 80, false}, {8, 32, 5, 3, 32, true},       {2, 17, 40, 29, 20, false},
                        {4, 256, 96, 50257, 1024, false}, {1, 1, 1, 1, 1, false}, {16, 128, 64, 50257, 128, true}};
  uint64_t seed = 400;
  for (const Case& cs : cases)
    for (DType t : kTypes) {
      INFO("B " << cs.B << " T " << cs.T << " C " << cs.C << " vocab " << cs.V << " positions " << cs.P << " "
                << dtype_name(t) << (cs.one_token ? " one token" : ""));
      const int64_t N = cs.B * cs.T, C = cs.C;
      std::vector<int32_t> tok =
          cs.one_token ? std::vector<int32_t>(size_t(N), int32_t(cs.V - 1)) : random_tokens(N, cs.V, ++seed, 2 % int32_t(cs.V));
      if (!cs.one_token && N > 10) tok[3] = -1, tok[N - 2] = int32_t(cs.V);  // invalid: NaN rows, skipped
      const Raw wte = random_raw(t, size_t(cs.V * C), ++seed), wpe = random_raw(t, size_t(cs.P * C), ++seed, 0.1);
      const Raw dxin = random_raw(t, size_t(N * C), ++seed), dwte0 = random_raw(t, size_t(cs.V * C), ++seed, 4.0);
      cpu::CpuOps cpu_ops;
      cpu_ops.reserve_embedding(N, cs.V);
      Raw x = sentinel(t, size_t(N * C)), dwte = dwte0, dwpe = sentinel(t, size_t(cs.P * C));
      EmbeddingArgs f;
      f.B = cs.B, f.T = cs.T, f.C = C, f.vocab = cs.V, f.max_positions = cs.P, f.type = t, f.tokens = tok.data();
      f.wte = wte.data(), f.wpe = wpe.data(), f.x = x.data();
      cpu_ops.embedding_forward(f);
      EmbeddingBackwardArgs b;
      b.B = cs.B, b.T = cs.T, b.C = C, b.vocab = cs.V, b.max_positions = cs.P, b.type = t, b.tokens = tok.data();
      b.dx = dxin.data(), b.dwte = dwte.data(), b.dwpe = dwpe.data();
      cpu_ops.embedding_backward(b);

      auto dev = make_device();
          dev->ops().reserve_embedding(N, cs.V);
      Dev gtok(*dev, tok.data(), tok.size() * sizeof(int32_t)), gwte(*dev, wte), gwpe(*dev, wpe), gx(*dev, sentinel(t, size_t(N * C)));
      Dev gdx(*dev, dxin), gdwte(*dev, dwte0), gdwpe(*dev, sentinel(t, size_t(cs.P * C)));
      EmbeddingArgs df = f;
      df.tokens = gtok.as<int32_t>(), df.wte = gwte.get(), df.wpe = gwpe.get(), df.x = gx.get();
      dev->ops().embedding_forward(df);
      EmbeddingBackwardArgs db = b;
      db.tokens = gtok.as<int32_t>(), db.dx = gdx.get(), db.dwte = gdwte.get(), db.dwpe = gdwpe.get();
      dev->ops().embedding_backward(db);
      TWINS_REQUIRE_SAME(gx.read(t), x, "x");
      TWINS_REQUIRE_SAME(gdwte.read(t), dwte, "dwte");
      TWINS_REQUIRE_SAME(gdwpe.read(t), dwpe, "dwpe");
      // A second backward accumulates again, the same as on the CPU.
      cpu_ops.embedding_backward(b);
      dev->ops().embedding_backward(db);
      TWINS_REQUIRE_SAME(gdwte.read(t), dwte, "dwte after a second backward");
    }
}

TEST_CASE("cuda tops embedding_backward: the reserve contract", "[.cuda][tops]") {
  const int64_t B = 2, T = 8, C = 4, V = 5;
  std::vector<int32_t> tok(size_t(B * T), 1);
  const Raw dx = random_raw(DType::F16, size_t(B * T * C), 1), w0 = random_raw(DType::F16, size_t(V * C), 2);
  // Three devices: no reserve, too few tokens, too small a vocabulary (then grown).
  auto none = make_device(), few = make_device(), small = make_device();
  for (Backend* dev : {none.get(), few.get(), small.get()}) {
    Dev gtok(*dev, tok.data(), tok.size() * sizeof(int32_t));
    Dev gdx(*dev, dx), gw(*dev, w0), gp(*dev, Raw(DType::F16, size_t(T * C)));
    EmbeddingBackwardArgs a;
    a.B = B, a.T = T, a.C = C, a.vocab = V, a.max_positions = T, a.type = DType::F16, a.tokens = gtok.as<int32_t>();
    a.dx = gdx.get(), a.dwte = gw.get(), a.dwpe = gp.get();
    if (dev == none.get()) {
      REQUIRE_THROWS_AS(dev->ops().embedding_backward(a), Error);
    } else if (dev == few.get()) {
      dev->ops().reserve_embedding(B * T - 1, V);
      REQUIRE_THROWS_AS(dev->ops().embedding_backward(a), Error);
    } else {
      dev->ops().reserve_embedding(B * T, V - 1);
      REQUIRE_THROWS_AS(dev->ops().embedding_backward(a), Error);
      dev->ops().reserve_embedding(1, V);  // grows the vocabulary only
      REQUIRE_NOTHROW(dev->ops().embedding_backward(a));
      REQUIRE(gw.read(DType::F16).bytes != w0.bytes);
    }
  }
}

TEST_CASE("cuda tops: two runs give the same bits, a captured graph replays them", "[.cuda][tops]") {
  const DType t = DType::BF16;
  const int64_t rows = 512, C = 768, batch = 24, T = 256, n = rows * 4 * C, B = 2, V = 50257, Ce = 64;
  // The layer norm's rows: its dgamma/dbeta over three segments (a second kernel folds them).
  const int64_t ln_rows = 3 * rows;
  const Raw x = random_raw(t, size_t(ln_rows * C), 1, 2.0, 1.5), g = random_raw(t, size_t(C), 2, 0.5, 1.0);
  const Raw bb = random_raw(t, size_t(C), 3), dy = random_raw(t, size_t(ln_rows * C), 4);
  const Raw s = random_raw(DType::F32, size_t(batch * T * T), 5, 4.0), dp = random_raw(t, size_t(batch * T * T), 6);
  const Raw hx = random_raw(t, size_t(n), 7, 3.0), hdy = random_raw(t, size_t(n), 8);
  const std::vector<int32_t> tok = random_tokens(rows, V, 9, 198);
  const Raw wte = random_raw(t, size_t(V * Ce), 10), wpe = random_raw(t, size_t(T * Ce), 11);
  const Raw edx = random_raw(t, size_t(rows * Ce), 12);
  // The fused attention at GPT-2's head dimension (the tensor-core path on a GPU): H heads of 64
  // over the rows as B sequences of rows / B.
  const int64_t AH = 2, AD = 64, AC = AH * AD, AT = rows / B;
  const Raw aqkv = random_raw(t, size_t(rows * 3 * AC), 13, 1.5), adout = random_raw(t, size_t(rows * AC), 14);
  auto dev = make_device();
  Dev gx(*dev, x), gg(*dev, g), gb(*dev, bb), gdy(*dev, dy), gs(*dev, s), gdp(*dev, dp), ghx(*dev, hx), ghdy(*dev, hdy), gtok(*dev, tok.data(), tok.size() * 4);
  Dev gwte(*dev, wte), gwpe(*dev, wpe), gwte0(*dev, wte), gedx(*dev, edx);
  Dev y(*dev, Raw(t, size_t(ln_rows * C))), mean(*dev, Raw(DType::F32, size_t(ln_rows))),
      rstd(*dev, Raw(DType::F32, size_t(ln_rows)));
  Dev dx(*dev, Raw(t, size_t(ln_rows * C))), dgam(*dev, Raw(t, size_t(C))), dbet(*dev, Raw(t, size_t(C)));
  Dev p(*dev, Raw(t, size_t(batch * T * T))), ds(*dev, Raw(t, size_t(batch * T * T)));
  // The embedding's outputs at its own width Ce (a buffer larger than the op writes would keep
  // poisoned tails, and the comparisons below would fail on them).
  Dev hy(*dev, Raw(t, size_t(n))), hdx(*dev, Raw(t, size_t(n))), ex(*dev, Raw(t, size_t(rows * Ce))),
      dwpe(*dev, Raw(t, size_t(T * Ce)));
  Dev gaqkv(*dev, aqkv), gadout(*dev, adout), aout(*dev, Raw(t, size_t(rows * AC))), adqkv(*dev, Raw(t, size_t(rows * 3 * AC)));
  Dev amax(*dev, Raw(DType::F32, size_t(B * AH * AT))), asum(*dev, Raw(DType::F32, size_t(B * AH * AT))),
      adelta(*dev, Raw(DType::F32, size_t(B * AH * AT)));
  dev->ops().reserve_embedding(rows, V);
  auto step = [&] {
    // dwte accumulates: start each step from the same values (a same-dtype cast is a copy).
    dev->ops().cast(gwte0.get(), t, gwte.get(), t, size_t(V * Ce));
    LayerNormArgs f;
    f.rows = ln_rows, f.C = C, f.type = t, f.x = gx.get(), f.gamma = gg.get(), f.beta = gb.get(), f.y = y.get();
    f.mean = mean.as<float>(), f.rstd = rstd.as<float>();
    dev->ops().layernorm_forward(f);
    LayerNormBackwardArgs lb;
    lb.rows = ln_rows, lb.C = C, lb.type = t, lb.dy = gdy.get(), lb.x = gx.get(), lb.gamma = gg.get();
    lb.mean = mean.as<float>(), lb.rstd = rstd.as<float>(), lb.dx = dx.get(), lb.dgamma = dgam.get();
    lb.dbeta = dbet.get();
    dev->ops().layernorm_backward(lb);
    dev->ops().causal_softmax_forward(CausalSoftmaxArgs{batch, T, 0.125f, gs.get(), DType::F32, p.get(), t});
    dev->ops().causal_softmax_backward(CausalSoftmaxBackwardArgs{batch, T, 0.125f, p.get(), t, gdp.get(), t, ds.get(), t});
    dev->ops().activation_forward(Activation::GeluTanh, Tensor{ghx.get(), t, 1, size_t(n)}, Tensor{hy.get(), t, 1, size_t(n)});
    dev->ops().activation_backward(Activation::GeluTanh, Tensor{ghx.get(), t, 1, size_t(n)}, Tensor{ghdy.get(), t, 1, size_t(n)}, Tensor{hdx.get(), t, 1, size_t(n)});
    EmbeddingArgs ea;
    ea.B = B, ea.T = rows / B, ea.C = Ce, ea.vocab = V, ea.max_positions = T, ea.type = t;
    ea.tokens = gtok.as<int32_t>(), ea.wte = gwte0.get(), ea.wpe = gwpe.get(), ea.x = ex.get();
    dev->ops().embedding_forward(ea);
    EmbeddingBackwardArgs eb;
    eb.B = B, eb.T = rows / B, eb.C = Ce, eb.vocab = V, eb.max_positions = T, eb.type = t;
    eb.tokens = gtok.as<int32_t>(), eb.dx = gedx.get(), eb.dwte = gwte.get(), eb.dwpe = dwpe.get();
    dev->ops().embedding_backward(eb);
    const float ascale = 0.125f;
    dev->ops().attention_forward(AttentionArgs{B, AT, AH, AD, ascale, t, gaqkv.get(), aout.get(), amax.as<float>(),
                                               asum.as<float>()});
    dev->ops().attention_backward(AttentionBackwardArgs{B, AT, AH, AD, ascale, t, gaqkv.get(), aout.get(),
                                                        gadout.get(), amax.as<float>(), asum.as<float>(),
                                                        adelta.as<float>(), adqkv.get()});
  };
  const Dev* outs[] = {&y,  &mean, &rstd, &dx,   &dgam, &dbet, &p,    &ds,   &hy,    &hdx,
                       &ex, &gwte, &dwpe, &aout, &amax, &asum, &adelta, &adqkv};
  auto snapshot = [&] {
    std::vector<Raw> r;
    for (const Dev* d : outs) r.push_back(d->read(DType::U8));
    return r;
  };
  auto poison = [&] {
    for (const Dev* d : outs) d->poison();
  };
  step();
  const auto first = snapshot();
  poison();
  step();
  const auto second = snapshot();
  poison();
  CapturedStep captured(*dev, step);
  captured.replay();
  const auto replay1 = snapshot();
  poison();
  captured.replay();
  const auto replay2 = snapshot();
  // Bytes that differ between two snapshots of an output, and the first of them.
  auto differing = [](const Raw& a, const Raw& b) {
    REQUIRE(a.bytes.size() == b.bytes.size());
    size_t n = 0, first_at = 0;
    for (size_t i = 0; i < a.bytes.size(); ++i)
      if (a.bytes[i] != b.bytes[i] && n++ == 0) first_at = i;
    return std::to_string(n) + " of " + std::to_string(a.bytes.size()) + " bytes differ" +
           (n ? ", the first at byte " + std::to_string(first_at) : "");
  };
  for (size_t k = 0; k < first.size(); ++k) {
    INFO("output " << k);
    CHECK(differing(first[k], second[k]) == differing(first[k], first[k]));
    CHECK(differing(first[k], replay1[k]) == differing(first[k], first[k]));
    CHECK(differing(first[k], replay2[k]) == differing(first[k], first[k]));
  }
  // And the device's results are the CPU twin's.
  cpu::CpuOps cpu_ops;
  cpu_ops.reserve_embedding(rows, V);
  Raw cdwte = wte, cdwpe(t, size_t(T * Ce));
  EmbeddingBackwardArgs eb;
  eb.B = B, eb.T = rows / B, eb.C = Ce, eb.vocab = V, eb.max_positions = T, eb.type = t, eb.tokens = tok.data();
  eb.dx = edx.data(), eb.dwte = cdwte.data(), eb.dwpe = cdwpe.data();
  cpu_ops.embedding_backward(eb);
  TWINS_REQUIRE_SAME(gwte.read(t), cdwte, "dwte");
  TWINS_REQUIRE_SAME(dwpe.read(t), cdwpe, "dwpe");
  Raw cp(t, size_t(batch * T * T));
  cpu_ops.causal_softmax_forward(CausalSoftmaxArgs{batch, T, 0.125f, s.data(), DType::F32, cp.data(), t});
  TWINS_REQUIRE_SAME(p.read(t), cp, "P");
}
