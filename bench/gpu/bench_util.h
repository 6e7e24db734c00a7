// Small helpers of the GPU benchmark programs: command-line dims, a CUDA error check that exits,
// and the median time of repeated work between two CUDA events.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#define BENCH_CUDA(call)                                                                           \
  do {                                                                                             \
    const cudaError_t bench_e_ = (call);                                                           \
    if (bench_e_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(bench_e_)); \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

namespace amp::bench {

// "784,1024,1024,10" -> {784, 1024, 1024, 10}
inline std::vector<size_t> parse_dims(const std::string& s) {
  std::vector<size_t> d;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t comma = s.find(',', pos);
    d.push_back(std::stoul(s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos)));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return d;
}

// Milliseconds per call of f (which enqueues work on `stream`): the median of `samples` timings of
// `iters` back-to-back calls, after `warmup` untimed calls.
// The options both GPU benchmarks take; false (after printing the usage) on an unknown one.
struct Args {
  std::vector<size_t> dims{784, 1024, 1024, 10};
  size_t batch = 128;
  std::string dtype = "f16";
  int iters = 50;
};

inline bool parse_args(int argc, char** argv, const char* program, Args& a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--dims") a.dims = parse_dims(v);
    else if (k == "--batch") a.batch = std::stoul(v);
    else if (k == "--dtype") a.dtype = v;
    else if (k == "--iters") a.iters = std::stoi(v);
    else {
      std::fprintf(stderr, "usage: %s [--dims 784,1024,1024,10] [--batch N] [--dtype f16|bf16] [--iters N]\n", program);
      return false;
    }
  }
  return true;
}

inline double median_ms(cudaStream_t stream, const std::function<void()>& f, int iters, int samples = 5,
                        int warmup = 3) {
  for (int i = 0; i < warmup; ++i) f();
  cudaEvent_t t0, t1;
  BENCH_CUDA(cudaEventCreate(&t0));
  BENCH_CUDA(cudaEventCreate(&t1));
  std::vector<double> v;
  for (int s = 0; s < samples; ++s) {
    BENCH_CUDA(cudaEventRecord(t0, stream));
    for (int i = 0; i < iters; ++i) f();
    BENCH_CUDA(cudaEventRecord(t1, stream));
    BENCH_CUDA(cudaEventSynchronize(t1));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, t0, t1));
    v.push_back(double(ms) / iters);
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace amp::bench
