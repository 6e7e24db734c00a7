// The general ops on the device against the double-precision GEMM reference and the CPU twins
// (amp::cpu::CpuOps): the cases of tests/unit/test_ops_general.cpp on every GEMM path of the
// device (CUDA: cuBLASLt, and cublasGemmStridedBatchedEx where cuBLASLt has no algorithm), add and
// row_sum bit-identical to the CPU, and a captured step of all three replayed.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "device_raw.h"

using namespace amp;
using namespace gpu_test;
using ops_ref::Raw;

namespace {

const DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16};

// Tensor cores may accumulate in FP32 with truncation instead of rounding: twice the error of a
// rounded FP32 sum at most; 4 leaves room and stays far below one 16-bit rounding.
constexpr double kDeviceAccFactor = 4.0;

Raw run_gemm(Backend& dev, const ops_ref::GemmCase& cs, std::string* path = nullptr) {
  Dev a(dev, cs.a), b(dev, cs.b), c(dev, cs.c0);
  const GemmArgs g = cs.bind(a.get(), b.get(), c.get());
  if (path) *path = gemm_path(dev, g);
  dev.ops().gemm(g);
  return c.read(cs.g.c);
}

}  // namespace

TEST_CASE("cuda gemm: every transpose and dtype pair, batch 1 and 3, padded ld, alpha and beta, both paths",
          "[.cuda][ops]") {
  auto dev = make_device();
  ops_ref::GemmLayout lay;
  lay.pad_a = 3, lay.pad_b = 5, lay.pad_c = 2, lay.gap = 7;
  for (size_t path_i = 0; path_i < gemm_paths().size(); ++path_i) {
    select_gemm_path(*dev, path_i);
    INFO("device GEMM path: " << gemm_paths()[path_i]);
    uint64_t seed = 1000;
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (DType ab : kFloatTypes)
          for (DType c : {DType::F32, DType::F16, DType::BF16})
            for (int64_t batch : {1, 3})
              for (float beta : {0.0f, 1.0f}) {
                if (c != DType::F32 && c != ab) continue;
                const float alpha = beta == 0.0f ? 0.75f : -1.25f;
                const auto cs = ops_ref::make_gemm_case(13, 11, 37, batch, ta, tb, ab, c, alpha, beta, lay, ++seed);
                std::string path;
                const Raw got = run_gemm(*dev, cs, &path);
                INFO("path " << path);
                OPS_REQUIRE_GEMM(cs, got, kDeviceAccFactor);
              }
  }
}

TEST_CASE("cuda gemm: broadcast operands, larger and misaligned shapes, both paths", "[.cuda][ops]") {
  auto dev = make_device();
  for (size_t path_i = 0; path_i < gemm_paths().size(); ++path_i) {
    select_gemm_path(*dev, path_i);
    INFO("device GEMM path: " << gemm_paths()[path_i]);
    uint64_t seed = 2000;
    for (DType ab : kFloatTypes)
      for (DType c : {DType::F32, ab}) {
        for (int which = 0; which < 3; ++which)
          for (float beta : {0.0f, 0.5f}) {
            ops_ref::GemmLayout lay;
            lay.pad_a = 1, lay.pad_b = 2, lay.pad_c = 3, lay.gap = 4;
            lay.broadcast_a = which != 1;
            lay.broadcast_b = which != 0;
            const auto cs = ops_ref::make_gemm_case(9, 14, 21, 4, which == 1, which != 1, ab, c, 1.5f, beta, lay, ++seed);
            std::string path;
            const Raw got = run_gemm(*dev, cs, &path);
            INFO("path " << path);
            OPS_REQUIRE_GEMM(cs, got, kDeviceAccFactor);
          }
        for (bool padded : {false, true}) {
          ops_ref::GemmLayout lay;
          if (padded) lay.pad_a = 8, lay.pad_b = 1, lay.pad_c = 5, lay.gap = 3, lay.front = 1;
          const auto cs = ops_ref::make_gemm_case(67, 130, 515, 2, padded, !padded, ab, c, 1.0f, padded ? 1.0f : 0.0f,
                                                  lay, ++seed);
          std::string path;
          const Raw got = run_gemm(*dev, cs, &path);
          INFO("path " << path);
          OPS_REQUIRE_GEMM(cs, got, kDeviceAccFactor);
        }
      }
  }
  // A large split-K-prone product with a 16-bit output: C must still be rounded once.
  select_gemm_path(*dev, 0);
  for (DType t : {DType::F16, DType::BF16}) {
    const auto cs = ops_ref::make_gemm_case(16, 16, 8192, 1, false, true, t, t, 1.0f, 1.0f, {}, 2999);
    std::string path;
    const Raw got = run_gemm(*dev, cs, &path);
    INFO("path " << path);
    OPS_REQUIRE_GEMM(cs, got, kDeviceAccFactor);
  }
}

TEST_CASE("cuda gemm: dense aligned products, k = 0 and invalid arguments", "[.cuda][ops]") {
  auto dev = make_device();
  for (DType t : kFloatTypes) {
    const auto cs = ops_ref::make_gemm_case(64, 64, 64, 2, false, true, t, t, 1.0f, 0.0f, {}, 7);
    std::string path;
    OPS_REQUIRE_GEMM(cs, run_gemm(*dev, cs, &path), kDeviceAccFactor);
    INFO(dtype_name(t) << ": " << path);
  }
  ops_ref::GemmLayout lay;
  lay.pad_c = 2, lay.gap = 1;
  for (DType c : kFloatTypes) {
    for (float beta : {0.0f, 2.0f}) {
      const auto cs = ops_ref::make_gemm_case(5, 6, 0, 2, false, false, c, c, 1.0f, beta, lay, 9);
      OPS_REQUIRE_GEMM(cs, run_gemm(*dev, cs), 1.0);
    }
  }
  GemmArgs g;
  g.m = 0, g.n = 4, g.k = 3;
  REQUIRE_NOTHROW(dev->ops().gemm(g));
  auto cs = ops_ref::make_gemm_case(4, 5, 6, 2, true, false, DType::F32, DType::F32, 1.0f, 0.0f, {}, 11);
  Dev a(*dev, cs.a), b(*dev, cs.b), c(*dev, cs.c0);
  GemmArgs bad = cs.bind(a.get(), b.get(), c.get());
  bad.lda = bad.m - 1;
  REQUIRE_THROWS_AS(dev->ops().gemm(bad), Error);
  bad = cs.bind(a.get(), b.get(), c.get());
  bad.c = DType::F16;
  REQUIRE_THROWS_AS(dev->ops().gemm(bad), Error);
  REQUIRE(c.read(DType::F32).bytes == cs.c0.bytes);
}

// Attention over one sequence, qkv stored [T, 3, H, D]: scores[h] = Q_h K_h^T / sqrt(D) (heads as
// the batch: stride D, leading dimension 3HD), then out[t, h, :] = scores[h] V_h into a [T, H, D]
// buffer (leading dimension HD, stride D). Each product against the index formulas in double,
// from the inputs it consumed.
TEST_CASE("cuda gemm: attention's strides into a [T, 3, H, D] buffer", "[.cuda][ops]") {
  auto dev = make_device();
  const int64_t T = 19, H = 3, D = 8;
  const double alpha = 1.0 / std::sqrt(double(D));
  for (DType ab : kFloatTypes) {
    INFO("dtype " << dtype_name(ab));
    Raw qkv(ab, size_t(T * 3 * H * D));
    ops_ref::fill_random(qkv, 77);
    auto q = [&](int64_t t, int64_t part, int64_t h, int64_t d) {
      return double(qkv.get(size_t(((t * 3 + part) * H + h) * D + d)));
    };
    Raw scores(ab, size_t(H * T * T)), out(ab, size_t(T * H * D));
    scores.fill_bits(ops_ref::sentinel_bits(ab));
    out.fill_bits(ops_ref::sentinel_bits(ab));
    Dev dqkv(*dev, qkv), dscores(*dev, scores), dout(*dev, out);
    const size_t es = dtype_size(ab);
    GemmArgs g;
    g.m = T, g.n = T, g.k = D, g.batch = H, g.trans_b = true, g.alpha = float(alpha);
    g.A = dqkv.get(), g.lda = 3 * H * D, g.stride_a = D;
    g.B = static_cast<const char*>(dqkv.get()) + H * D * es, g.ldb = 3 * H * D, g.stride_b = D;
    g.C = dscores.get(), g.ldc = T, g.stride_c = T * T, g.ab = ab, g.c = ab;
    GemmArgs pv;
    pv.m = T, pv.n = D, pv.k = T, pv.batch = H;
    pv.A = dscores.get(), pv.lda = T, pv.stride_a = T * T;
    pv.B = static_cast<const char*>(dqkv.get()) + 2 * H * D * es, pv.ldb = 3 * H * D, pv.stride_b = D;
    pv.C = dout.get(), pv.ldc = H * D, pv.stride_c = D, pv.ab = ab, pv.c = ab;
    INFO("paths " << gemm_path(*dev, g) << " / " << gemm_path(*dev, pv));
    dev->ops().gemm(g);
    dev->ops().gemm(pv);
    const Raw gs = dscores.read(ab), go = dout.read(ab);
    const double u = ops_ref::unit_roundoff(ab), acc = kDeviceAccFactor * 0x1p-24;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t s = 0; s < T; ++s) {
          double ref = 0, mag = 0;
          for (int64_t d = 0; d < D; ++d) {
            ref += q(t, 0, h, d) * q(s, 1, h, d);
            mag += std::fabs(q(t, 0, h, d) * q(s, 1, h, d));
          }
          ref *= alpha;
          const double e = double(D + 3) * acc * alpha * mag;
          const double got = gs.get(size_t((h * T + t) * T + s));
          INFO("scores[" << h << "][" << t << "][" << s << "] = " << got << ", reference " << ref);
          REQUIRE(std::fabs(got - ref) <= e + u * (std::fabs(ref) + e) + 1e-30);
        }
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d) {
          double ref = 0, mag = 0;
          for (int64_t s = 0; s < T; ++s) {
            const double p = gs.get(size_t((h * T + t) * T + s));
            ref += p * q(s, 2, h, d);
            mag += std::fabs(p * q(s, 2, h, d));
          }
          const double e = double(T + 3) * acc * mag;
          const double got = go.get(size_t((t * H + h) * D + d));
          INFO("out[" << t << "][" << h << "][" << d << "] = " << got << ", reference " << ref);
          REQUIRE(std::fabs(got - ref) <= e + u * (std::fabs(ref) + e) + 1e-30);
        }
  }
}

TEST_CASE("cuda add: every dtype combination bit-identical to the CPU twin, in place too", "[.cuda][ops]") {
  auto dev = make_device();
  cpu::CpuOps cpu_ops;
  uint64_t seed = 4000;
  for (int64_t n : {1, 7, 2053, 100003})
    for (DType ta : kFloatTypes)
      for (DType tb : kFloatTypes)
        for (DType to : kFloatTypes)
          for (int offset : {0, 1})  // offset 1: the unvectorized path
            for (float scale : {1.0f, 1.0f / 3.0f}) {
            INFO("n " << n << " " << dtype_name(ta) << " + " << dtype_name(tb) << " -> " << dtype_name(to) << " offset "
                      << offset << " scale " << scale);
            Raw a(ta, size_t(n + offset)), b(tb, size_t(n + offset)), out(to, size_t(n + offset) + 1);
            ops_ref::fill_random(a, ++seed, 3.0);
            ops_ref::fill_random(b, ++seed, 3.0);
            a.set(size_t(offset), INFINITY), b.set(size_t(offset), 1.0f);
            out.fill_bits(ops_ref::sentinel_bits(to));
            Raw cpu_out = out;
            const auto off = [&](void* p, DType t) { return static_cast<char*>(p) + offset * dtype_size(t); };
            cpu_ops.add(AddArgs{off(a.data(), ta), ta, off(b.data(), tb), tb, off(cpu_out.data(), to), to, n, scale});
            Dev da(*dev, a), db(*dev, b), dout(*dev, out);
            dev->ops().add(AddArgs{off(da.get(), ta), ta, off(db.get(), tb), tb, off(dout.get(), to), to, n, scale});
            const Raw got = dout.read(to);
            for (size_t i = 0; i < got.size(); ++i) {
              INFO("element " << i << ": device " << got.get(i) << " cpu " << cpu_out.get(i));
              REQUIRE(ops_ref::same_value(got, i, cpu_out, i));
            }
          }
  // In place: out = a.
  for (DType t : kFloatTypes) {
    Raw a(t, 1000), b(t, 1000);
    ops_ref::fill_random(a, 1);
    ops_ref::fill_random(b, 2);
    const Raw spec = ops_ref::add_spec(a, b, t);
    Dev da(*dev, a), db(*dev, b);
    dev->ops().add(AddArgs{da.get(), t, db.get(), t, da.get(), t, 1000});
    const Raw got = da.read(t);
    for (size_t i = 0; i < got.size(); ++i) REQUIRE(ops_ref::same_value(got, i, spec, i));
  }
}

TEST_CASE("cuda row_sum: every dtype pair bit-identical to the CPU twin and the specification", "[.cuda][ops]") {
  auto dev = make_device();
  cpu::CpuOps cpu_ops;
  struct Shape {
    int64_t rows, cols, ldx;
  };
  const Shape shapes[] = {{0, 5, 5},    {1, 1, 1},       {5, 3, 7},      {17, 33, 40},
                          {1000, 3, 3}, {300, 700, 701}, {40000, 2, 5},  {4096, 1024, 1024}};
  uint64_t seed = 5000;
  for (const Shape& s : shapes)
    for (DType tx : kFloatTypes)
      for (DType to : kFloatTypes) {
        INFO("rows " << s.rows << " cols " << s.cols << " ldx " << s.ldx << " " << dtype_name(tx) << " -> "
                     << dtype_name(to));
        Raw x(tx, size_t(std::max<int64_t>(1, s.rows * s.ldx)));
        ops_ref::fill_random(x, ++seed);
        for (int64_t i = 0; i < s.rows; ++i)
          for (int64_t j = s.cols; j < s.ldx; ++j) x.set_bits(size_t(i * s.ldx + j), ops_ref::sentinel_bits(tx));
        Raw out(to, size_t(s.cols) + 1);
        out.fill_bits(ops_ref::sentinel_bits(to));
        Raw cpu_out = out;
        cpu_ops.row_sum(RowSumArgs{x.data(), tx, s.rows, s.cols, s.ldx, cpu_out.data(), to});
        Dev dx(*dev, x), dout(*dev, out);
        dev->ops().row_sum(RowSumArgs{dx.get(), tx, s.rows, s.cols, s.ldx, dout.get(), to});
        const Raw got = dout.read(to);
        const Raw spec = ops_ref::row_sum_spec(x, s.rows, s.cols, s.ldx, to);
        for (size_t j = 0; j < got.size(); ++j) {
          INFO("column " << j << ": device " << got.get(j) << " cpu " << cpu_out.get(j));
          REQUIRE(got.bits(j) == cpu_out.bits(j));
          if (j < size_t(s.cols)) REQUIRE(got.bits(j) == spec.bits(j));
        }
      }
}

TEST_CASE("cuda general ops captured into a graph replay with the eager results", "[.cuda][ops]") {
  auto dev = make_device();
  const DType t = DType::BF16;
  // C dense (no padded leading dimension): the add reads its first 48 x 40 elements as a matrix.
  const auto cs = ops_ref::make_gemm_case(48, 40, 96, 3, false, true, t, t, 0.5f, 0.0f, {}, 31);
  Raw x(t, 48 * 40);
  ops_ref::fill_random(x, 32);
  Dev a(*dev, cs.a), b(*dev, cs.b), c(*dev, cs.c0), dx(*dev, x);
  Raw sums(DType::F32, 40), tall(t, 1300 * 40);  // 1300 rows: three segments, folded by a second kernel
  ops_ref::fill_random(tall, 33);
  Dev dsum(*dev, sums), dadd(*dev, x), dtall(*dev, tall), dtall_sum(*dev, sums);
  const GemmArgs g = cs.bind(a.get(), b.get(), c.get());
  // C[0] + x, then its column sums: a [rows, cols] residual and a bias gradient.
  const AddArgs add{c.get(), t, dx.get(), t, dadd.get(), t, 48 * 40};
  const RowSumArgs rs{dadd.get(), t, 48, 40, 40, dsum.get(), DType::F32};
  const RowSumArgs rs_tall{dtall.get(), t, 1300, 40, 40, dtall_sum.get(), DType::F32};
  auto step = [&] {
    dev->ops().gemm(g);
    dev->ops().add(add);
    dev->ops().row_sum(rs);
    dev->ops().row_sum(rs_tall);
  };
  step();  // eager, plans the GEMM and sizes the row sums' scratch
  const Raw c_eager = c.read(t), add_eager = dadd.read(t), sum_eager = dsum.read(DType::F32);
  const Raw tall_eager = dtall_sum.read(DType::F32);
  OPS_REQUIRE_GEMM(cs, c_eager, kDeviceAccFactor);
  // Poison the outputs, then capture and replay.
  c.poison();
  dadd.poison();
  dsum.poison();
  dtall_sum.poison();
  CapturedStep captured(*dev, step);
  captured.replay();
  // Every element of C is written (beta 0): the replay rewrote what the poison destroyed.
  const Raw c_graph = c.read(t);
  for (int64_t bi = 0; bi < cs.g.batch; ++bi)
    for (int64_t i = 0; i < cs.g.m; ++i)
      for (int64_t j = 0; j < cs.g.n; ++j) {
        const size_t e = size_t(cs.off_c + bi * cs.g.stride_c + i * cs.g.ldc + j);
        REQUIRE(c_graph.bits(e) == c_eager.bits(e));
      }
  REQUIRE(dadd.read(t).bytes == add_eager.bytes);
  REQUIRE(dsum.read(DType::F32).bytes == sum_eager.bytes);
  REQUIRE(dtall_sum.read(DType::F32).bytes == tall_eager.bytes);
  REQUIRE(tall_eager.bytes == ops_ref::row_sum_spec(tall, 1300, 40, 40, DType::F32).bytes);
}
