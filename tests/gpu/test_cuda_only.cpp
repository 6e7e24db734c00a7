// Device test cases that only mean something on CUDA (amp_gpu_tests only): the cuBLAS mapping of
// the linear layers, which GEMM path dense products take, the embedding scratch's size, the calls a
// capture refuses, the NCCL step clock, and the virtual-memory pages of ZeRO-2's gradient buffer.
// Everything else of tests/gpu/ also runs on the CPU stand-in (device_env.h).
#include <cstdint>
#include <string>

#include "core/error.h"
#include "cuda/cuda_backend.h"
#include "cuda/gemm.h"
#include "device_env.h"

using namespace amp;
using namespace gpu_test;

namespace {

struct Shape {
  size_t batch, in, out;
};

// What cuBLAS computes for a GemmCall on f32 data, element by element from the column-major
// definition: D[i + j ldd] = sum_p op(A)(i, p) op(B)(p, j) (+ bias[i]).
void reference_gemm(const cuda::GemmCall& c) {
  const float* a = static_cast<const float*>(c.a);
  const float* b = static_cast<const float*>(c.b);
  float* d = static_cast<float*>(c.d);
  for (uint64_t j = 0; j < c.n; ++j)
    for (uint64_t i = 0; i < c.m; ++i) {
      double s = c.bias ? double(static_cast<const float*>(c.bias)[i]) : 0.0;
      for (uint64_t p = 0; p < c.k; ++p) {
        const double av = c.trans_a ? a[p + i * uint64_t(c.lda)] : a[i + p * uint64_t(c.lda)];
        const double bv = c.trans_b ? b[j + p * uint64_t(c.ldb)] : b[p + j * uint64_t(c.ldb)];
        s += av * bv;
      }
      d[i + j * uint64_t(c.ldd)] = float(s);
    }
}

}  // namespace

// Runs without a device: the row-major -> column-major mapping of the three linear GEMMs,
// evaluated by the column-major definition, against the CPU backend.
TEST_CASE("the linear layers' cuBLAS mapping computes the row-major products", "[.cuda][gemm]") {
  CpuBackend cpu(1);
  for (const Shape& s : {Shape{1, 1, 1}, Shape{3, 5, 7}, Shape{37, 129, 65}, Shape{8, 2, 33}}) {
    INFO("batch " << s.batch << " in " << s.in << " out " << s.out);
    const auto x = randn(s.batch * s.in, 1), w = randn(s.out * s.in, 2), b = randn(s.out, 3);
    const auto dy = randn(s.batch * s.out, 4);
    auto t = [&](const std::vector<float>& v, size_t r, size_t c) {
      return Tensor{const_cast<float*>(v.data()), DType::F32, r, c};
    };
    std::vector<float> y(s.batch * s.out), y_ref(y.size()), dx(s.batch * s.in), dx_ref(dx.size());
    std::vector<float> dw(s.out * s.in), dw_ref(dw.size()), db(s.out);
    cpu.ops().linear_forward(t(x, s.batch, s.in), t(w, s.out, s.in), t(b, 1, s.out), t(y, s.batch, s.out));
    cuda::GemmCall c = cuda::linear_forward_call(t(x, s.batch, s.in), t(w, s.out, s.in), t(y_ref, s.batch, s.out));
    c.bias = b.data();
    reference_gemm(c);
    GPU_REQUIRE_CLOSE(y_ref, y, 1e-5, 1e-5);
    cpu.ops().linear_backward_input(t(dy, s.batch, s.out), t(w, s.out, s.in), t(dx, s.batch, s.in));
    reference_gemm(cuda::linear_backward_input_call(t(dy, s.batch, s.out), t(w, s.out, s.in), t(dx_ref, s.batch, s.in)));
    GPU_REQUIRE_CLOSE(dx_ref, dx, 1e-5, 1e-5);
    cpu.ops().linear_backward_weight(t(dy, s.batch, s.out), t(x, s.batch, s.in), t(dw, s.out, s.in), t(db, 1, s.out));
    reference_gemm(cuda::linear_backward_weight_call(t(dy, s.batch, s.out), t(x, s.batch, s.in), t(dw_ref, s.out, s.in)));
    GPU_REQUIRE_CLOSE(dw_ref, dw, 1e-5, 1e-5);
  }
}


TEST_CASE("calls that would synchronize are refused during a capture", "[.cuda][graph]") {
  auto gpu = make_device();
  Buffer b = gpu->memory().alloc(64);
  float host[4] = {1, 2, 3, 4};
  REQUIRE(gpu->capture().begin_capture());
  CHECK_THROWS_WITH(gpu->memory().download(host, b.data(), 16), Catch::Contains("captured"));
  CHECK_THROWS_WITH(gpu->memory().upload(b.data(), host, 16), Catch::Contains("captured"));
  CHECK_THROWS_WITH(gpu->memory().alloc(16), Catch::Contains("captured"));
  gpu->memory().zero(b.data(), 64);
  gpu->capture().end_capture();
  gpu->capture().replay();
  gpu->memory().synchronize();
}

TEST_CASE("cuda gemm: dense aligned products run on cuBLASLt", "[.cuda][ops]") {
  auto dev = make_device();
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    const size_t es = dtype_size(t);
    Buffer a = dev->memory().alloc(2 * 64 * 64 * es), b = dev->memory().alloc(2 * 64 * 64 * es), c = dev->memory().alloc(2 * 64 * 64 * es);
    GemmArgs g;
    g.m = g.n = g.k = 64, g.batch = 2, g.trans_b = true;
    g.A = a.data(), g.lda = 64, g.stride_a = 64 * 64, g.B = b.data(), g.ldb = 64, g.stride_b = 64 * 64;
    g.C = c.data(), g.ldc = 64, g.stride_c = 64 * 64, g.ab = t, g.c = t;
    INFO(dtype_name(t));
    CHECK(gemm_path(*dev, g) == "cublasLt");
  }
}

TEST_CASE("cuda tops embedding_backward: the scratch is what reserve asked for", "[.cuda][tops]") {
  auto dev = make_device();
  auto& cuda = dynamic_cast<cuda::CudaBackend&>(*dev);
  REQUIRE(cuda.cuda_ops().embedding_scratch_bytes() == 0);
  dev->ops().reserve_embedding(16, 5);
  REQUIRE(cuda.cuda_ops().embedding_scratch_bytes() > size_t(16) * 16);
}

TEST_CASE("cuda memory: pages of the driver's granularity; release of memory not from alloc_releasable is refused",
          "[.cuda][zero]") {
  auto gpu = make_device();
  DeviceMemory& mem = gpu->memory();
  const size_t page = mem.release_granularity();
  INFO("granularity " << page << " bytes");
  CHECK(page >= (size_t(64) << 10));
  CHECK((page & (page - 1)) == 0);
  Buffer plain = mem.alloc(4 * page);
  CHECK_THROWS_WITH(mem.release(plain.data(), 4 * page), Catch::Contains("not from alloc_releasable"));
  Buffer r = mem.alloc_releasable(3 * page);
  CHECK(reinterpret_cast<uintptr_t>(r.data()) % page == 0);
  CHECK(mem.resident_bytes(r.data(), 3 * page) == 3 * page);  // mapped when made
}
