// The CPU GELU (tanh approximation) on FP32 arrays, forward y = gelu(x) and backward
// dx = dy * gelu'(x): the scalar specification (tmath::gelu_tanh, gelu_tanh_grad of
// transformer_args.h), its AVX2 form (ops_gelu.cpp) and its AVX-512F form (gelu_avx512.cpp), chosen
// at run time. All give the same bits; tests/unit/test_ops_transformer.cpp runs each one the CPU
// has against the scalar one. y may be x, dx may be dy or x.
#pragma once

#include <cstdint>
#include <vector>

namespace amp::cpu {

struct GeluKernels {
  const char* isa;  // "scalar", "avx2", "avx512"
  void (*forward)(const float* x, float* y, int64_t n);
  void (*backward)(const float* x, const float* dy, float* dx, int64_t n);
};

// The kernels this CPU can run, the scalar specification first, the widest last.
const std::vector<GeluKernels>& available_gelu_kernels();
// The widest of them (what CpuOps uses).
const GeluKernels& active_gelu_kernels();

// AVX-512F kernels (gelu_avx512.cpp); only called where the CPU has AVX-512F.
void gelu_forward_avx512(const float* x, float* y, int64_t n);
void gelu_backward_avx512(const float* x, const float* dy, float* dx, int64_t n);

}  // namespace amp::cpu
