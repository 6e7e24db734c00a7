// The general ops on the CPU (amp::cpu::CpuOps): the strided batched GEMM against a double
// reference on random data for every transpose and dtype combination, padded leading dimensions,
// batch gaps, broadcast (stride 0) operands, alpha != 1, beta 0 (C pre-filled with NaN: never
// read) and beta != 0, attention's strides into a [T, 3, H, D] buffer; add and row_sum against
// their exact specifications and double references for every dtype.
#include <catch2/catch.hpp>

#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "ops_general_ref.h"

using namespace amp;
using ops_ref::Raw;

namespace {

const DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16};

// Runs a case on the CPU: C starts as the case's c0 and is returned after the call.
Raw run_gemm(cpu::CpuOps& ops, const ops_ref::GemmCase& cs) {
  Raw c = cs.c0;
  ops.gemm(cs.bind(cs.a.data(), cs.b.data(), c.data()));
  return c;
}

// Runs a case at 1, 2 and 3 threads: within the reference bound at 1, the same bits at 2 and 3.
void check_at_1_2_3_threads(cpu::CpuOps& ops, const ops_ref::GemmCase& cs) {
  const int saved = omp_get_max_threads();
  Raw first;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    const Raw got = run_gemm(ops, cs);
    INFO(threads << " threads");
    if (threads == 1) {
      OPS_REQUIRE_GEMM(cs, got, 1.0);
      first = got;
    } else {
      CHECK(got.bytes == first.bytes);
    }
  }
  omp_set_num_threads(saved);
}

// The oneDNN kernels a test ran and the ISA limit it ran under, for its WARN line.
std::string ran_on(const std::set<std::string>& impls) {
  std::string ran;
  for (const auto& i : impls) ran += (ran.empty() ? "" : "; ") + i;
  const char* isa_limit = std::getenv("ONEDNN_MAX_CPU_ISA");
  return ran + "; oneDNN ISA limit " + (isa_limit ? isa_limit : "none");
}

}  // namespace

TEST_CASE("gemm: every transpose and dtype pair, batch 1 and 3, padded ld, alpha and beta", "[ops]") {
  cpu::CpuOps ops;
  ops_ref::GemmLayout lay;
  lay.pad_a = 3, lay.pad_b = 5, lay.pad_c = 2, lay.gap = 7;
  uint64_t seed = 1000;
  size_t cases = 0;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (DType ab : kFloatTypes)
        for (DType c : {DType::F32, DType::F16, DType::BF16})
          for (int64_t batch : {1, 3})
            for (float beta : {0.0f, 1.0f}) {
              if (c != DType::F32 && c != ab) continue;  // refused (see the invalid-arguments case)
              const float alpha = beta == 0.0f ? 0.75f : -1.25f;
              const auto cs = ops_ref::make_gemm_case(13, 11, 37, batch, ta, tb, ab, c, alpha, beta, lay, ++seed);
              OPS_REQUIRE_GEMM(cs, run_gemm(ops, cs), 1.0);
              ++cases;
            }
  CHECK(cases == 80);  // 4 transposes x 5 dtype pairs x 2 batches x 2 betas
}

TEST_CASE("gemm: broadcast operands (batch stride 0) and a non-unit beta", "[ops]") {
  cpu::CpuOps ops;
  uint64_t seed = 2000;
  for (DType ab : kFloatTypes)
    for (DType c : {DType::F32, ab})
      for (int which = 0; which < 3; ++which)  // A, B, both broadcast
        for (bool ta : {false, true})
          for (float beta : {0.0f, 0.5f}) {
            ops_ref::GemmLayout lay;
            lay.pad_a = 1, lay.pad_b = 2, lay.pad_c = 3, lay.gap = 4;
            lay.broadcast_a = which != 1;
            lay.broadcast_b = which != 0;
            const auto cs = ops_ref::make_gemm_case(9, 14, 21, 4, ta, !ta, ab, c, 1.5f, beta, lay, ++seed);
            OPS_REQUIRE_GEMM(cs, run_gemm(ops, cs), 1.0);
          }
}

TEST_CASE("gemm: larger shapes (blocked kernels), dense and padded, alpha 1", "[ops]") {
  cpu::CpuOps ops;
  uint64_t seed = 3000;
  for (DType ab : kFloatTypes)
    for (DType c : {DType::F32, ab})
      for (bool padded : {false, true}) {
        ops_ref::GemmLayout lay;
        if (padded) lay.pad_a = 8, lay.pad_b = 1, lay.pad_c = 5, lay.gap = 3, lay.front = 1;
        const auto cs = ops_ref::make_gemm_case(67, 130, 515, 2, padded, !padded, ab, c, 1.0f, padded ? 1.0f : 0.0f,
                                                lay, ++seed);
        OPS_REQUIRE_GEMM(cs, run_gemm(ops, cs), 1.0);
      }
}

// Attention over one sequence: qkv is [T, 3, H, D]; scores[h] = Q_h K_h^T / sqrt(D) with the heads
// as the batch (stride D, leading dimension 3HD), then out[t, h, :] = scores[h] V_h written into a
// [T, H, D] buffer (leading dimension HD, stride D). Checked against the index formulas directly,
// not through the GEMM reference.
TEST_CASE("gemm: attention's strides into a [T, 3, H, D] buffer", "[ops]") {
  cpu::CpuOps ops;
  const int64_t T = 19, H = 3, D = 8;
  const float alpha = float(1.0 / std::sqrt(double(D)));
  for (DType ab : kFloatTypes) {
    INFO("dtype " << dtype_name(ab));
    Raw qkv(ab, size_t(T * 3 * H * D));
    ops_ref::fill_random(qkv, 77);
    auto q = [&](int64_t t, int64_t part, int64_t h, int64_t d) {
      return double(qkv.get(size_t(((t * 3 + part) * H + h) * D + d)));
    };
    Raw scores(ab, size_t(H * T * T));
    scores.fill_bits(ops_ref::sentinel_bits(ab));
    GemmArgs g;
    g.m = T, g.n = T, g.k = D, g.batch = H, g.trans_b = true, g.alpha = alpha;
    g.A = static_cast<const char*>(qkv.data()) + 0 * H * D * dtype_size(ab), g.lda = 3 * H * D, g.stride_a = D;
    g.B = static_cast<const char*>(qkv.data()) + 1 * H * D * dtype_size(ab), g.ldb = 3 * H * D, g.stride_b = D;
    g.C = scores.data(), g.ldc = T, g.stride_c = T * T;
    g.ab = ab, g.c = ab;
    if (ab == DType::F32) CHECK(ops.gemm_implementation(g).find("(direct)") != std::string::npos);
    ops.gemm(g);
    const double u = ops_ref::unit_roundoff(ab);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t s = 0; s < T; ++s) {
          double ref = 0, mag = 0;
          for (int64_t d = 0; d < D; ++d) {
            ref += q(t, 0, h, d) * q(s, 1, h, d);
            mag += std::fabs(q(t, 0, h, d) * q(s, 1, h, d));
          }
          ref *= alpha;
          const double tol = double(D + 3) * 0x1p-24 * alpha * mag * (1 + u) + u * std::fabs(ref) + 1e-30;
          const double got = scores.get(size_t((h * T + t) * T + s));
          INFO("scores[" << h << "][" << t << "][" << s << "] = " << got << ", reference " << ref);
          REQUIRE(std::fabs(got - ref) <= tol);
        }
    // out = P V with P = the scores (in the operands' dtype), interleaved heads in the output.
    Raw out(ab, size_t(T * H * D));
    out.fill_bits(ops_ref::sentinel_bits(ab));
    GemmArgs pv;
    pv.m = T, pv.n = D, pv.k = T, pv.batch = H;
    pv.A = scores.data(), pv.lda = T, pv.stride_a = T * T;
    pv.B = static_cast<const char*>(qkv.data()) + 2 * H * D * dtype_size(ab), pv.ldb = 3 * H * D, pv.stride_b = D;
    pv.C = out.data(), pv.ldc = H * D, pv.stride_c = D;
    pv.ab = ab, pv.c = ab;
    if (ab == DType::F32) CHECK(ops.gemm_implementation(pv).find("(direct)") != std::string::npos);
    ops.gemm(pv);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d) {
          double ref = 0, mag = 0;
          for (int64_t s = 0; s < T; ++s) {
            const double p = scores.get(size_t((h * T + t) * T + s));
            ref += p * q(s, 2, h, d);
            mag += std::fabs(p * q(s, 2, h, d));
          }
          const double tol = double(T + 3) * 0x1p-24 * mag * (1 + u) + u * std::fabs(ref) + 1e-30;
          const double got = out.get(size_t((t * H + h) * D + d));
          INFO("out[" << t << "][" << h << "][" << d << "] = " << got << ", reference " << ref);
          REQUIRE(std::fabs(got - ref) <= tol);
        }
  }
}

TEST_CASE("gemm: alpha is a run-time value of a cached primitive, repeated calls agree", "[ops]") {
  cpu::CpuOps ops;
  for (DType ab : kFloatTypes) {
    ops_ref::GemmLayout lay;
    lay.pad_c = 1;
    auto cs = ops_ref::make_gemm_case(10, 12, 17, 2, false, true, ab, ab, 1.0f, 0.0f, lay, 55);
    const Raw first = run_gemm(ops, cs);
    OPS_REQUIRE_GEMM(cs, first, 1.0);
    REQUIRE(run_gemm(ops, cs).bytes == first.bytes);  // same primitive, same bits
    cs.g.alpha = -3.0f;
    cs.name += " (alpha changed)";
    OPS_REQUIRE_GEMM(cs, run_gemm(ops, cs), 1.0);
  }
}

TEST_CASE("gemm: k = 0, empty shapes and invalid arguments", "[ops]") {
  cpu::CpuOps ops;
  ops_ref::GemmLayout lay;
  lay.pad_c = 2, lay.gap = 1;
  for (DType c : kFloatTypes) {
    // k == 0, beta == 0: zeros (C pre-filled with NaN is not read).
    auto cs = ops_ref::make_gemm_case(5, 6, 0, 2, false, false, c, c, 1.0f, 0.0f, lay, 9);
    OPS_REQUIRE_GEMM(cs, run_gemm(ops, cs), 1.0);
    // k == 0, beta == 2: C doubled.
    cs = ops_ref::make_gemm_case(5, 6, 0, 2, false, false, c, c, 1.0f, 2.0f, lay, 10);
    OPS_REQUIRE_GEMM(cs, run_gemm(ops, cs), 1.0);
  }
  // m == 0 or batch == 0: nothing is touched (null pointers are fine).
  GemmArgs g;
  g.m = 0, g.n = 4, g.k = 3;
  REQUIRE_NOTHROW(ops.gemm(g));
  g.m = 4, g.batch = 0;
  REQUIRE_NOTHROW(ops.gemm(g));
  // A leading dimension shorter than the stored row, and a zero C stride over a batch, are refused.
  auto cs = ops_ref::make_gemm_case(4, 5, 6, 2, true, false, DType::F32, DType::F32, 1.0f, 0.0f, {}, 11);
  Raw c = cs.c0;
  GemmArgs bad = cs.bind(cs.a.data(), cs.b.data(), c.data());
  bad.lda = bad.m - 1;  // A stored k x m
  REQUIRE_THROWS_AS(ops.gemm(bad), Error);
  bad = cs.bind(cs.a.data(), cs.b.data(), c.data());
  bad.stride_c = 0;
  REQUIRE_THROWS_AS(ops.gemm(bad), Error);
  bad = cs.bind(cs.a.data(), cs.b.data(), c.data());
  bad.c = DType::I32;
  REQUIRE_THROWS_AS(ops.gemm(bad), Error);
  bad.c = DType::F16;  // f32 operands, f16 output: no such cuBLAS GEMM, so refused on both twins
  REQUIRE_THROWS_AS(ops.gemm(bad), Error);
  bad.ab = DType::BF16;  // mixed 16-bit types
  REQUIRE_THROWS_AS(ops.gemm(bad), Error);
  REQUIRE(c.bytes == cs.c0.bytes);
}

TEST_CASE("gemm: how each dtype runs on this CPU (FP16 widened, FP32 direct)", "[ops]") {
  cpu::CpuOps ops;
  std::string how[3];
  for (int i = 0; i < 3; ++i) {
    const auto cs = ops_ref::make_gemm_case(32, 32, 32, 2, false, true, kFloatTypes[i], kFloatTypes[i], 1.0f, 1.0f,
                                            {}, 5);
    Raw c = cs.c0;
    how[i] = ops.gemm_implementation(cs.bind(cs.a.data(), cs.b.data(), c.data()));
  }
  WARN("oneDNN: f32 " << how[0] << ", f16 " << how[1] << ", bf16 " << how[2]
                      << (ops.bf16_native() ? " (native BF16 matmul)" : " (no BF16 matmul on this CPU)"));
  CHECK(how[0].find("(direct)") != std::string::npos);
  CHECK(how[1].find("(widened to f32)") != std::string::npos);
  // Without a BF16 matmul, BF16 must be widened; with one, a widened BF16 product is only slower.
  if (!ops.bf16_native()) CHECK(how[2].find("(widened to f32)") != std::string::npos);
}

TEST_CASE("add: every dtype combination against the FP32 specification and a double reference", "[ops]") {
  cpu::CpuOps ops;
  uint64_t seed = 4000;
  for (int64_t n : {0, 1, 7, 2053, 20000})
    for (DType ta : kFloatTypes)
      for (DType tb : kFloatTypes)
        for (DType to : kFloatTypes)
          for (float scale : {1.0f, 0.25f, 1.0f / 3.0f}) {
            INFO("n " << n << " " << dtype_name(ta) << " + " << dtype_name(tb) << " -> " << dtype_name(to) << " scale "
                      << scale);
            Raw a(ta, size_t(n)), b(tb, size_t(n)), out(to, size_t(n) + 1);
            ops_ref::fill_random(a, ++seed, 3.0);
            ops_ref::fill_random(b, ++seed, 3.0);
            out.fill_bits(ops_ref::sentinel_bits(to));
            AddArgs args{a.data(), ta, b.data(), tb, out.data(), to, n, scale};
            ops.add(args);
            const Raw spec = ops_ref::add_spec(a, b, to, scale);
            const double u = ops_ref::unit_roundoff(to);
            for (size_t i = 0; i < size_t(n); ++i) {
              INFO("element " << i << ": " << a.get(i) << " + " << b.get(i) << " = " << out.get(i));
              REQUIRE(ops_ref::same_value(out, i, spec, i));
              const double ref = (double(a.get(i)) + double(b.get(i))) * double(scale);
              const double tol = 0x1p-23 * std::fabs(ref) * (1 + u) + u * std::fabs(ref) + ops_ref::tiny_of(to);
              REQUIRE(std::fabs(double(out.get(i)) - ref) <= tol);
            }
            REQUIRE(out.bits(size_t(n)) == ops_ref::sentinel_bits(to));  // nothing past n
          }
}

TEST_CASE("add: in place, and overflow, infinities and NaN as one FP32 addition and one rounding", "[ops]") {
  cpu::CpuOps ops;
  for (DType t : kFloatTypes) {
    INFO(dtype_name(t));
    const std::vector<float> av = {60000.0f, 65504.0f, -3e38f, INFINITY, -INFINITY, NAN, 1.0f, 3e-8f, 1.0f, 0.0f};
    const std::vector<float> bv = {60000.0f, 16.0f, -3e38f, -INFINITY, 1.0f, 2.0f, NAN, 3e-8f, 0x1p-12f, -0.0f};
    Raw a(t, av.size()), b(t, bv.size());
    for (size_t i = 0; i < av.size(); ++i) a.set(i, av[i]), b.set(i, bv[i]);
    const Raw spec = ops_ref::add_spec(a, b, t);
    Raw x = a;  // out = a, in place
    ops.add(AddArgs{x.data(), t, b.data(), t, x.data(), t, int64_t(av.size())});
    for (size_t i = 0; i < av.size(); ++i) {
      INFO("element " << i << ": " << a.get(i) << " + " << b.get(i) << " = " << x.get(i));
      REQUIRE(ops_ref::same_value(x, i, spec, i));
    }
    Raw y = b;  // out = b, in place
    ops.add(AddArgs{a.data(), t, y.data(), t, y.data(), t, int64_t(av.size())});
    for (size_t i = 0; i < av.size(); ++i) REQUIRE(ops_ref::same_value(y, i, spec, i));
  }
  // out aliasing an input of another dtype is refused.
  Raw a(DType::F32, 4), b(DType::F16, 4);
  REQUIRE_THROWS_AS(ops.add(AddArgs{a.data(), DType::F32, b.data(), DType::F16, b.data(), DType::F32, 4}), Error);
}

TEST_CASE("row_sum: every dtype pair against the fixed-order specification and a double reference", "[ops]") {
  cpu::CpuOps ops;
  struct Shape {
    int64_t rows, cols, ldx;
  };
  const Shape shapes[] = {{0, 5, 5},     {1, 1, 1},      {5, 3, 7},       {17, 33, 40},
                          {1000, 3, 3},  {300, 700, 701}, {40000, 2, 5},  {64, 257, 260}};
  uint64_t seed = 5000;
  for (const Shape& s : shapes)
    for (DType tx : kFloatTypes)
      for (DType to : kFloatTypes) {
        INFO("rows " << s.rows << " cols " << s.cols << " ldx " << s.ldx << " " << dtype_name(tx) << " -> "
                     << dtype_name(to));
        Raw x(tx, size_t(std::max<int64_t>(1, s.rows * s.ldx)));
        ops_ref::fill_random(x, ++seed);
        // Padding columns hold NaN: reading one would show.
        for (int64_t i = 0; i < s.rows; ++i)
          for (int64_t j = s.cols; j < s.ldx; ++j) x.set_bits(size_t(i * s.ldx + j), ops_ref::sentinel_bits(tx));
        Raw out(to, size_t(s.cols) + 1);
        out.fill_bits(ops_ref::sentinel_bits(to));
        ops.row_sum(RowSumArgs{x.data(), tx, s.rows, s.cols, s.ldx, out.data(), to});
        const Raw spec = ops_ref::row_sum_spec(x, s.rows, s.cols, s.ldx, to);
        std::vector<double> ref, tol;
        ops_ref::row_sum_double(x, s.rows, s.cols, s.ldx, to, &ref, &tol);
        for (size_t j = 0; j < size_t(s.cols); ++j) {
          INFO("column " << j << ": " << out.get(j) << ", specification " << spec.get(j) << ", double " << ref[j]);
          REQUIRE(out.bits(j) == spec.bits(j));
          REQUIRE(std::fabs(double(out.get(j)) - ref[j]) <= tol[j]);
        }
        REQUIRE(out.bits(size_t(s.cols)) == ops_ref::sentinel_bits(to));
      }
}

TEST_CASE("row_sum gives the same bits with 1 and 2 threads, gemm stays within its bound", "[ops]") {
  cpu::CpuOps ops;
  Raw x(DType::F16, 3000 * 40);
  ops_ref::fill_random(x, 6000);
  const auto cs = ops_ref::make_gemm_case(70, 50, 300, 2, false, true, DType::BF16, DType::F32, 1.0f, 1.0f, {}, 6001);
  const int saved = omp_get_max_threads();
  Raw sums[2], prods[2];
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    sums[threads - 1] = Raw(DType::F32, 40);
    ops.row_sum(RowSumArgs{x.data(), DType::F16, 3000, 40, 40, sums[threads - 1].data(), DType::F32});
    prods[threads - 1] = run_gemm(ops, cs);
  }
  omp_set_num_threads(saved);
  REQUIRE(sums[0].bytes == sums[1].bytes);
  OPS_REQUIRE_GEMM(cs, prods[0], 1.0);
  OPS_REQUIRE_GEMM(cs, prods[1], 1.0);
}

TEST_CASE("row_sum: the specification's bits at 1, 2, 3, 5 and 32 threads", "[ops]") {
  // The work items are lane groups (16 lanes down to 1 per group) and column ranges (more than one
  // from 32 threads on at 3 column tiles); rows not a multiple of the 16 lanes, a padded stride.
  cpu::CpuOps ops;
  struct Shape {
    int64_t rows, cols, ldx;
  };
  const Shape shapes[] = {{301, 700, 701}, {1000, 1, 1}, {37, 513, 513}};
  uint64_t seed = 6100;
  const int saved = omp_get_max_threads();
  for (const Shape& s : shapes) {
    Raw x(DType::BF16, size_t(s.rows * s.ldx));
    ops_ref::fill_random(x, ++seed);
    const Raw spec = ops_ref::row_sum_spec(x, s.rows, s.cols, s.ldx, DType::F32);
    for (int threads : {1, 2, 3, 5, 32}) {
      INFO("rows " << s.rows << " cols " << s.cols << ", " << threads << " threads");
      omp_set_num_threads(threads);
      Raw out(DType::F32, size_t(s.cols));
      ops.row_sum(RowSumArgs{x.data(), DType::BF16, s.rows, s.cols, s.ldx, out.data(), DType::F32});
      CHECK(out.bytes == spec.bytes);
    }
  }
  omp_set_num_threads(saved);
}

TEST_CASE("gemm: strided operands run on the dense product's brgemm through dense copies, with its bits", "[ops]") {
  // oneDNN takes a strided operand (one head's columns of qkv, a tile of C narrower than C) on its
  // jit GEMM only; where the dense shape has brgemm, DnnlMatmul copies the strided operands into
  // dense buffers and runs that (matmul_dnnl.cpp). Then the strided product's bits are the dense
  // one's on the same values.
  struct Shape { int64_t m, n, k, batch; bool ta, tb; ops_ref::GemmLayout lay; bool copied; };
  ops_ref::GemmLayout qkv, out, both;
  qkv.pad_a = qkv.pad_b = 1088;  // Q and K: rows 3C apart (C = 576, D = 64)
  out.pad_b = 1088, out.pad_c = 512;  // P V: V's rows 3C apart, the head's output C apart
  both.pad_a = 5, both.pad_b = 3, both.pad_c = 7, both.gap = 11;
  // Copied where the copies pay (matmul_dnnl.cpp): K or N at most 256, or 1024 FLOPs per copied
  // element; not A^T B, nor a few rows.
  const std::vector<Shape> shapes{{256, 256, 64, 4, false, true, qkv, true},    {256, 64, 256, 4, false, false, out, true},
                                  {300, 200, 96, 1, false, true, both, true},  {64, 96, 128, 3, false, false, both, true},
                                  {256, 64, 256, 3, true, false, out, false},  {12, 64, 64, 2, false, false, both, false},
                                  {300, 600, 700, 1, false, false, both, false}};
  cpu::CpuOps ops;
  uint64_t seed = 9100;
  size_t packed = 0;
  std::set<std::string> impls;
  for (const Shape& sh : shapes)
    for (DType ab : {DType::F32, DType::BF16})
      for (DType c : {DType::F32, ab}) {
        const auto strided = ops_ref::make_gemm_case(sh.m, sh.n, sh.k, sh.batch, sh.ta, sh.tb, ab, c, 1.0f, 0.0f,
                                                     sh.lay, ++seed);
        auto dense = ops_ref::make_gemm_case(sh.m, sh.n, sh.k, sh.batch, sh.ta, sh.tb, ab, c, 1.0f, 0.0f, {}, seed);
        // The strided case's values, densely.
        const GemmArgs& gs = strided.g;
        const GemmArgs& gd = dense.g;
        for (int64_t bi = 0; bi < gs.batch; ++bi) {
          for (int64_t r = 0; r < gs.a_rows(); ++r)
            for (int64_t q = 0; q < gs.a_cols(); ++q)
              dense.a.set_bits(size_t(bi * gd.stride_a + r * gd.lda + q), strided.a.bits(size_t(bi * gs.stride_a + r * gs.lda + q)));
          for (int64_t r = 0; r < gs.b_rows(); ++r)
            for (int64_t q = 0; q < gs.b_cols(); ++q)
              dense.b.set_bits(size_t(bi * gd.stride_b + r * gd.ldb + q), strided.b.bits(size_t(bi * gs.stride_b + r * gs.ldb + q)));
        }
        Raw probe = strided.c0, dense_probe = dense.c0;
        const std::string how = ops.gemm_implementation(strided.bind(strided.a.data(), strided.b.data(), probe.data()));
        const std::string dense_how =
            ops.gemm_implementation(dense.bind(dense.a.data(), dense.b.data(), dense_probe.data()));
        impls.insert(how);
        INFO(strided.name << ": " << how << "; dense: " << dense_how);
        const Raw got = run_gemm(ops, strided), want = run_gemm(ops, dense);
        OPS_REQUIRE_GEMM(strided, got, 1.0);
        const bool copies = dense_how.rfind("brg:", 0) == 0 && sh.copied;
        CHECK((how.find("(dense copies)") != std::string::npos) == copies);
        if (!copies) continue;
        ++packed;
        size_t differ = 0;
        for (int64_t bi = 0; bi < gs.batch; ++bi)
          for (int64_t i = 0; i < gs.m; ++i)
            for (int64_t j = 0; j < gs.n; ++j)
              differ += got.bits(size_t(bi * gs.stride_c + i * gs.ldc + j)) != want.bits(size_t(bi * gd.stride_c + i * gd.ldc + j));
        CHECK(differ == 0);
      }
  WARN(packed << " strided products ran on dense copies (" << ran_on(impls) << ")"
              << (packed ? "" : ": no brgemm on this CPU, nothing to copy"));
}

TEST_CASE("gemm: A^T B over long sums, in chunks and in parts summed by the product: within the bound, the same bits at 1, 2 and 3 threads", "[ops]") {
  // The weight gradients' shape. On brgemm the sum over K is cut into chunks of 1024 rows added in
  // order, and a chunk into parts, each added to the chunk's sum by the product (oneDNN's sum
  // post-op; matmul_dnnl.h): 512 rows on AMX; in FP32 where a chunk of B passes 8 MiB (n 2100),
  // 128 (256 rows of B would pass 2 MiB). K not a multiple of either: a short last part and a
  // short last chunk.
  struct Shape { int64_t m, n, k; bool tb; };
  const std::vector<Shape> shapes{{96, 80, 2600, false},   {200, 64, 1536, false}, {64, 48, 1100, true},
                                  {130, 70, 700, false},   {40, 2100, 1100, false}};
  cpu::CpuOps ops;  // dense operands (strided A^T B products run on the jit GEMM, uncut)
  std::set<std::string> impls;
  size_t in_parts = 0;
  uint64_t seed = 9300;
  for (const Shape& sh : shapes)
    for (DType ab : {DType::F32, DType::BF16})
      for (DType c : {DType::F32, ab}) {
        const auto cs = ops_ref::make_gemm_case(sh.m, sh.n, sh.k, 1, true, sh.tb, ab, c, 1.0f, 0.0f, {}, ++seed);
        Raw c_probe = cs.c0;
        const std::string how = ops.gemm_implementation(cs.bind(cs.a.data(), cs.b.data(), c_probe.data()));
        impls.insert(how);
        INFO(cs.name << ": " << how);
        // Parts where the chunks run on AMX or are FP32 on brgemm: with a dense B wherever the
        // product does (B^T's chunks are strided columns, which oneDNN 2.6 runs on its jit GEMM).
        const bool parts = how.find("summed by the product") != std::string::npos;
        if (!sh.tb) {
          const char* want = nullptr;
          if (how.rfind("brg:avx512_core_amx", 0) == 0) want = "parts of 512";
          else if (ab == DType::F32 && how.rfind("brg:", 0) == 0 && sh.n > 2048) want = "parts of 128";
          CHECK(parts == (want != nullptr));
          if (want) CHECK(how.find(want) != std::string::npos);
        }
        in_parts += parts;
        check_at_1_2_3_threads(ops, cs);
      }
  WARN(in_parts << " long A^T B products ran in parts summed by the product (" << ran_on(impls) << ")"
                << (in_parts ? "" : ": no brgemm on this CPU"));
}

TEST_CASE("gemm: the same bits at 1, 2 and 3 threads, batched and single, strided and widened", "[ops]") {
  // The explicit attention's batched products and the LM head's single ones (alpha 1, beta 0).
  struct Shape { int64_t m, n, k, batch; bool ta, tb; };
  const std::vector<Shape> shapes{{256, 256, 64, 8, false, true}, {256, 64, 256, 8, false, false},
                                  {256, 64, 256, 5, true, false},  {512, 300, 128, 1, false, true},
                                  {300, 128, 512, 1, true, false}, {512, 128, 300, 1, false, false},
                                  {64, 64, 32, 32, false, true},   {64, 32, 64, 32, true, false}};
  ops_ref::GemmLayout lay;
  lay.pad_a = 3, lay.pad_b = 1, lay.pad_c = 2, lay.gap = 5;
  cpu::CpuOps ops;
  std::set<std::string> impls;
  uint64_t seed = 7000;
  for (const Shape& sh : shapes)
    for (DType ab : {DType::F32, DType::BF16})
      for (DType c : {DType::F32, ab}) {
        const auto cs = ops_ref::make_gemm_case(sh.m, sh.n, sh.k, sh.batch, sh.ta, sh.tb, ab, c, 1.0f, 0.0f, lay, ++seed);
        Raw c_probe = cs.c0;
        impls.insert(ops.gemm_implementation(cs.bind(cs.a.data(), cs.b.data(), c_probe.data())));
        INFO(dtype_name(ab) << " -> " << dtype_name(c) << ", " << sh.batch << " x " << sh.m << "x" << sh.n << "x"
                            << sh.k << (sh.ta ? " A^T" : "") << (sh.tb ? " B^T" : ""));
        check_at_1_2_3_threads(ops, cs);
      }
  WARN("gemm ran on " << ran_on(impls));
}
