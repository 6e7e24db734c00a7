// The GEMMs of an MLP step through the backend's cuBLASLt plans (bias epilogue on the forward
// ones) next to cuBLAS's own cublasGemmEx on the same shapes and data, measured in the same run:
// TFLOP/s from CUDA events, median of repeats. One JSON line per GEMM on stdout.
// Usage: bench_gpu_gemm [--dims 784,1024,1024,10] [--batch 128] [--dtype f16|bf16] [--iters 50]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/convert.h"
#include "core/rng.h"
#include "cuda/gemm.h"

namespace {

using namespace amp;

#define BENCH_CUBLAS(call)                                                        \
  do {                                                                            \
    const cublasStatus_t s_ = (call);                                             \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                            \
      std::fprintf(stderr, "bench_gpu_gemm: %s failed: status %d\n", #call, int(s_)); \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

void* device_random(size_t n, DType t, uint64_t seed) {
  Rng r(seed);
  std::vector<float> f(n);
  for (auto& x : f) x = float(r.normal() * 0.1);
  std::vector<unsigned char> raw(n * dtype_size(t));
  convert(f.data(), DType::F32, raw.data(), t, n);
  void* p = nullptr;
  BENCH_CUDA(cudaMalloc(&p, raw.size()));
  BENCH_CUDA(cudaMemcpy(p, raw.data(), raw.size(), cudaMemcpyHostToDevice));
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args args;
  if (!bench::parse_args(argc, argv, "bench_gpu_gemm", args)) return 2;
  const std::vector<size_t>& dims = args.dims;
  const size_t batch = args.batch;
  const std::string dtype = args.dtype;
  const int iters = args.iters;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "bench_gpu_gemm: no CUDA device\n");
    return 1;
  }
  try {
    const DType t = dtype == "bf16" ? DType::BF16 : DType::F16;
    const cudaDataType_t ct = t == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
    cudaStream_t stream;
    BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cuda::LtGemm ours(size_t(32) << 20);
    cublasHandle_t h;
    BENCH_CUBLAS(cublasCreate(&h));
    BENCH_CUBLAS(cublasSetStream(h, stream));
    const size_t widest = *std::max_element(dims.begin(), dims.end());
    void* a = device_random(batch * widest, t, 1);
    void* b = device_random(batch * widest, t, 2);
    void* w = device_random(widest * widest, t, 3);
    void* bias = device_random(widest, t, 4);
    void* d = device_random(std::max(batch, widest) * widest, t, 5);
    for (size_t l = 0; l + 1 < dims.size(); ++l) {
      const size_t in = dims[l], out = dims[l + 1];
      const Tensor x{a, t, batch, in}, wt{w, t, out, in}, y{d, t, batch, out}, dy{b, t, batch, out};
      const Tensor dx{d, t, batch, in}, dw{d, t, out, in};
      struct Op {
        const char* name;
        cuda::GemmCall call;
      };
      std::vector<Op> ops{{"fwd", cuda::linear_forward_call(x, wt, y)}, {"bwd_weight", cuda::linear_backward_weight_call(dy, x, dw)}};
      ops[0].call.bias = bias;
      if (l > 0) ops.push_back({"bwd_input", cuda::linear_backward_input_call(dy, wt, dx)});
      for (const Op& op : ops) {
        const cuda::GemmCall& c = op.call;
        const double ms_ours = bench::median_ms(stream, [&] { ours.run(c, stream); }, iters);
        const float alpha = 1.0f, beta = 0.0f;
        const double ms_cublas = bench::median_ms(stream, [&] {
          BENCH_CUBLAS(cublasGemmEx(h, c.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, c.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    int(c.m), int(c.n), int(c.k), &alpha, c.a, ct, int(c.lda), c.b, ct, int(c.ldb),
                                    &beta, c.d, ct, int(c.ldd), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        }, iters);
        const double flop = 2.0 * double(c.m) * double(c.n) * double(c.k);
        std::printf("{\"bench\": \"gemm\", \"layer\": %zu, \"op\": \"%s\", \"m\": %llu, \"n\": %llu, \"k\": %llu, "
                    "\"dtype\": \"%s\", \"ours_us\": %.3f, \"cublas_us\": %.3f, \"ours_tflops\": %.2f, "
                    "\"cublas_tflops\": %.2f}\n",
                    l + 1, op.name, (unsigned long long)c.m, (unsigned long long)c.n, (unsigned long long)c.k,
                    dtype.c_str(), ms_ours * 1e3, ms_cublas * 1e3, flop / (ms_ours * 1e-3) / 1e12,
                    flop / (ms_cublas * 1e-3) / 1e12);
      }
    }
    BENCH_CUDA(cudaStreamSynchronize(stream));
    for (void* p : {a, b, w, bias, d}) cudaFree(p);
    cublasDestroy(h);
    cudaStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu_gemm: %s\n", e.what());
    return 1;
  }
  return 0;
}
