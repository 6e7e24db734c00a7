// The general ops on the GPU (amp::cuda::GeneralOps) against the double-precision GEMM reference
// and the CPU twins (amp::cpu::GeneralOps): the cases of tests/unit/test_ops_general.cpp on both
// GEMM paths (cuBLASLt, and cublasGemmStridedBatchedEx where cuBLASLt has no algorithm), add and
// row_sum bit-identical to the CPU, and a graph capture of all three replayed.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "../unit/ops_general_ref.h"
#include "backend/cpu/ops_general.h"
#include "core/error.h"
#include "cudart/device_buffer.h"
#include "cuda/ops_general.h"

using namespace amp;
using ops_ref::Raw;

namespace {

const DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16};

// Tensor cores may accumulate in FP32 with truncation instead of rounding: twice the error of a
// rounded FP32 sum at most; 4 leaves room and stays far below one 16-bit rounding.
constexpr double kDeviceAccFactor = 4.0;

void require_device() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  INFO("cudaGetDeviceCount: " << cudaGetErrorString(e) << ", " << n << " devices");
  REQUIRE((e == cudaSuccess && n > 0));
}

// Raw host bytes mirrored in device memory.
struct Dev {
  cuda::DeviceBuffer<unsigned char> buf;
  size_t bytes = 0;
  explicit Dev(const Raw& r) : buf(std::max<size_t>(r.bytes.size(), 1)), bytes(r.bytes.size()) {
    if (bytes) AMP_CUDA_CHECK(cudaMemcpy(buf.get(), r.bytes.data(), bytes, cudaMemcpyHostToDevice));
  }
  void* get() const { return buf.get(); }
  Raw read(DType t) const {
    Raw r(t, bytes / dtype_size(t));
    if (bytes) AMP_CUDA_CHECK(cudaMemcpy(r.bytes.data(), buf.get(), bytes, cudaMemcpyDeviceToHost));
    return r;
  }
};

Raw run_gemm(cuda::GeneralOps& ops, const ops_ref::GemmCase& cs, cudaStream_t s, std::string* path = nullptr) {
  Dev a(cs.a), b(cs.b), c(cs.c0);
  const GemmArgs g = cs.bind(a.get(), b.get(), c.get());
  if (path) *path = ops.gemm_path(g);
  ops.gemm(g, s);
  AMP_CUDA_CHECK(cudaStreamSynchronize(s));
  return c.read(cs.g.c);
}

}  // namespace

TEST_CASE("cuda gemm: every transpose and dtype pair, batch 1 and 3, padded ld, alpha and beta, both paths",
          "[.cuda][ops]") {
  require_device();
  cuda::GeneralOps ops;
  cuda::Stream stream(0);
  ops_ref::GemmLayout lay;
  lay.pad_a = 3, lay.pad_b = 5, lay.pad_c = 2, lay.gap = 7;
  for (bool force_cublas : {false, true}) {
    ops.set_force_cublas(force_cublas);
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
                const Raw got = run_gemm(ops, cs, stream.get(), &path);
                INFO("path " << path);
                OPS_REQUIRE_GEMM(cs, got, kDeviceAccFactor);
              }
  }
}

TEST_CASE("cuda gemm: broadcast operands, larger and misaligned shapes, both paths", "[.cuda][ops]") {
  require_device();
  cuda::GeneralOps ops;
  cuda::Stream stream(0);
  for (bool force_cublas : {false, true}) {
    ops.set_force_cublas(force_cublas);
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
            const Raw got = run_gemm(ops, cs, stream.get(), &path);
            INFO("path " << path);
            OPS_REQUIRE_GEMM(cs, got, kDeviceAccFactor);
          }
        for (bool padded : {false, true}) {
          ops_ref::GemmLayout lay;
          if (padded) lay.pad_a = 8, lay.pad_b = 1, lay.pad_c = 5, lay.gap = 3, lay.front = 1;
          const auto cs = ops_ref::make_gemm_case(67, 130, 515, 2, padded, !padded, ab, c, 1.0f, padded ? 1.0f : 0.0f,
                                                  lay, ++seed);
          std::string path;
          const Raw got = run_gemm(ops, cs, stream.get(), &path);
          INFO("path " << path);
          OPS_REQUIRE_GEMM(cs, got, kDeviceAccFactor);
        }
      }
  }
  // A large split-K-prone product with a 16-bit output: C must still be rounded once.
  ops.set_force_cublas(false);
  for (DType t : {DType::F16, DType::BF16}) {
    const auto cs = ops_ref::make_gemm_case(16, 16, 8192, 1, false, true, t, t, 1.0f, 1.0f, {}, 2999);
    std::string path;
    const Raw got = run_gemm(ops, cs, stream.get(), &path);
    INFO("path " << path);
    OPS_REQUIRE_GEMM(cs, got, kDeviceAccFactor);
  }
}

TEST_CASE("cuda gemm: dense aligned products run on cuBLASLt, k = 0 and invalid arguments", "[.cuda][ops]") {
  require_device();
  cuda::GeneralOps ops;
  cuda::Stream stream(0);
  std::string how;
  for (DType t : kFloatTypes) {
    const auto cs = ops_ref::make_gemm_case(64, 64, 64, 2, false, true, t, t, 1.0f, 0.0f, {}, 7);
    std::string path;
    OPS_REQUIRE_GEMM(cs, run_gemm(ops, cs, stream.get(), &path), kDeviceAccFactor);
    how += std::string(dtype_name(t)) + ": " + path + " ";
    CHECK(path == "cublasLt");
  }
  WARN("GEMM paths: " << how);
  ops_ref::GemmLayout lay;
  lay.pad_c = 2, lay.gap = 1;
  for (DType c : kFloatTypes) {
    for (float beta : {0.0f, 2.0f}) {
      const auto cs = ops_ref::make_gemm_case(5, 6, 0, 2, false, false, c, c, 1.0f, beta, lay, 9);
      OPS_REQUIRE_GEMM(cs, run_gemm(ops, cs, stream.get()), 1.0);
    }
  }
  GemmArgs g;
  g.m = 0, g.n = 4, g.k = 3;
  REQUIRE_NOTHROW(ops.gemm(g, stream.get()));
  auto cs = ops_ref::make_gemm_case(4, 5, 6, 2, true, false, DType::F32, DType::F32, 1.0f, 0.0f, {}, 11);
  Dev a(cs.a), b(cs.b), c(cs.c0);
  GemmArgs bad = cs.bind(a.get(), b.get(), c.get());
  bad.lda = bad.m - 1;
  REQUIRE_THROWS_AS(ops.gemm(bad, stream.get()), Error);
  bad = cs.bind(a.get(), b.get(), c.get());
  bad.c = DType::F16;
  REQUIRE_THROWS_AS(ops.gemm(bad, stream.get()), Error);
  AMP_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  REQUIRE(c.read(DType::F32).bytes == cs.c0.bytes);
}

// Attention over one sequence, qkv stored [T, 3, H, D]: scores[h] = Q_h K_h^T / sqrt(D) (heads as
// the batch: stride D, leading dimension 3HD), then out[t, h, :] = scores[h] V_h into a [T, H, D]
// buffer (leading dimension HD, stride D). Each product against the index formulas in double,
// from the inputs it consumed.
TEST_CASE("cuda gemm: attention's strides into a [T, 3, H, D] buffer", "[.cuda][ops]") {
  require_device();
  cuda::GeneralOps ops;
  cuda::Stream stream(0);
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
    Dev dqkv(qkv), dscores(scores), dout(out);
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
    INFO("paths " << ops.gemm_path(g) << " / " << ops.gemm_path(pv));
    ops.gemm(g, stream.get());
    ops.gemm(pv, stream.get());
    AMP_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
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
  require_device();
  cuda::GeneralOps ops;
  cpu::GeneralOps cpu_ops;
  cuda::Stream stream(0);
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
            Dev da(a), db(b), dout(out);
            ops.add(AddArgs{off(da.get(), ta), ta, off(db.get(), tb), tb, off(dout.get(), to), to, n, scale},
                    stream.get());
            AMP_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
            const Raw got = dout.read(to);
            for (size_t i = 0; i < got.size(); ++i) {
              INFO("element " << i << ": gpu " << got.get(i) << " cpu " << cpu_out.get(i));
              REQUIRE(ops_ref::same_value(got, i, cpu_out, i));
            }
          }
  // In place: out = a.
  for (DType t : kFloatTypes) {
    Raw a(t, 1000), b(t, 1000);
    ops_ref::fill_random(a, 1);
    ops_ref::fill_random(b, 2);
    const Raw spec = ops_ref::add_spec(a, b, t);
    Dev da(a), db(b);
    ops.add(AddArgs{da.get(), t, db.get(), t, da.get(), t, 1000}, stream.get());
    AMP_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    const Raw got = da.read(t);
    for (size_t i = 0; i < got.size(); ++i) REQUIRE(ops_ref::same_value(got, i, spec, i));
  }
}

TEST_CASE("cuda row_sum: every dtype pair bit-identical to the CPU twin and the specification", "[.cuda][ops]") {
  require_device();
  cuda::GeneralOps ops;
  cpu::GeneralOps cpu_ops;
  cuda::Stream stream(0);
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
        Dev dx(x), dout(out);
        ops.row_sum(RowSumArgs{dx.get(), tx, s.rows, s.cols, s.ldx, dout.get(), to}, stream.get());
        AMP_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
        const Raw got = dout.read(to);
        const Raw spec = ops_ref::row_sum_spec(x, s.rows, s.cols, s.ldx, to);
        for (size_t j = 0; j < got.size(); ++j) {
          INFO("column " << j << ": gpu " << got.get(j) << " cpu " << cpu_out.get(j));
          REQUIRE(got.bits(j) == cpu_out.bits(j));
          if (j < size_t(s.cols)) REQUIRE(got.bits(j) == spec.bits(j));
        }
      }
}

TEST_CASE("cuda general ops captured into a graph replay with the eager results", "[.cuda][ops]") {
  require_device();
  cuda::GeneralOps ops;
  cuda::Stream stream(0);
  const DType t = DType::BF16;
  ops_ref::GemmLayout lay;
  lay.pad_c = 4;
  const auto cs = ops_ref::make_gemm_case(48, 40, 96, 3, false, true, t, t, 0.5f, 0.0f, lay, 31);
  Raw x(t, 48 * 40);
  ops_ref::fill_random(x, 32);
  Dev a(cs.a), b(cs.b), c(cs.c0), dx(x);
  Raw sums(DType::F32, 40);
  Dev dsum(sums), dadd(x);
  const GemmArgs g = cs.bind(a.get(), b.get(), c.get());
  // C (48 x 40 of 44) + x, then its column sums: a [rows, cols] residual and a bias gradient.
  const AddArgs add{c.get(), t, dx.get(), t, dadd.get(), t, 48 * 40};
  const RowSumArgs rs{dadd.get(), t, 48, 40, 40, dsum.get(), DType::F32};
  auto step = [&] {
    ops.gemm(g, stream.get());
    ops.add(add, stream.get());
    ops.row_sum(rs, stream.get());
  };
  step();  // eager, plans the GEMM
  AMP_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  const Raw c_eager = c.read(t), add_eager = dadd.read(t), sum_eager = dsum.read(DType::F32);
  OPS_REQUIRE_GEMM(cs, c_eager, kDeviceAccFactor);
  // Poison the outputs, then capture and replay.
  AMP_CUDA_CHECK(cudaMemset(c.get(), 0xff, c.bytes));
  AMP_CUDA_CHECK(cudaMemset(dadd.get(), 0xff, dadd.bytes));
  AMP_CUDA_CHECK(cudaMemset(dsum.get(), 0xff, dsum.bytes));
  cudaGraph_t graph = nullptr;
  AMP_CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
  step();
  AMP_CUDA_CHECK(cudaStreamEndCapture(stream.get(), &graph));
  cudaGraphExec_t exec = nullptr;
  AMP_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cuda::GraphExec owned(graph, exec);
  AMP_CUDA_CHECK(cudaGraphLaunch(owned.get(), stream.get()));
  AMP_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  // C's padding was poisoned too: compare the written elements only.
  const Raw c_graph = c.read(t);
  for (int64_t bi = 0; bi < cs.g.batch; ++bi)
    for (int64_t i = 0; i < cs.g.m; ++i)
      for (int64_t j = 0; j < cs.g.n; ++j) {
        const size_t e = size_t(cs.off_c + bi * cs.g.stride_c + i * cs.g.ldc + j);
        REQUIRE(c_graph.bits(e) == c_eager.bits(e));
      }
  REQUIRE(dadd.read(t).bytes == add_eager.bytes);
  REQUIRE(dsum.read(DType::F32).bytes == sum_eager.bytes);
}
