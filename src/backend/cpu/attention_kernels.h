// Internals of the CPU fused attention (ops_attention.cpp): one (sequence, head) at a time on FP32
// copies of its rows, by the scalar specification of backend/attention_args.h
// (attention_kernels.cpp) or by the tile kernels of attention_tiles.h compiled for AVX2 + FMA
// (attention_kernels.cpp) and AVX-512F (attention_avx512.cpp), chosen at run time. All of them
// give the same bits; tests/unit/test_attention.cpp runs each one the CPU has against the scalar one.
#pragma once

#include <cstdint>
#include <vector>

namespace amp::cpu {

// One head of one sequence, FP32, rows padded to Dp columns (a multiple of 16, zeros past D) and
// the transposed K and V with a row stride of Tp columns (at least T rounded up to kAttnKeyTile;
// zeros past T).
struct AttnHead {
  int64_t T = 0, D = 0, Dp = 0, Tp = 0;
  float scale = 1.0f;
  const float* q = nullptr;     // [T][Dp]
  const float* k = nullptr;     // [T][Dp]   (backward)
  const float* kt = nullptr;    // [D][Tp]
  const float* v = nullptr;     // [T][Dp]   (forward)
  const float* vt = nullptr;    // [D][Tp]   (backward)
  const float* o = nullptr;     // [T][Dp]   the forward's output (backward)
  const float* dout = nullptr;  // [T][Dp]   (backward)
  const float* m = nullptr;     // [T] row_max (backward)
  const float* l = nullptr;     // [T] row_sum (backward)
  float* out = nullptr;         // [T][Dp]   (forward)
  float* m_out = nullptr;       // [T]       (forward)
  float* l_out = nullptr;       // [T]       (forward)
  float* delta = nullptr;       // [T]       (backward)
  float* dq = nullptr;          // [T][Dp]   (backward)
  float* dk = nullptr;
  float* dv = nullptr;
};

struct AttnKernels {
  const char* isa;  // "scalar", "avx2", "avx512"
  void (*forward)(const AttnHead&);
  void (*backward)(const AttnHead&);
};

constexpr int64_t kAttnPad = 16;  // Dp: D rounded up to this

// The kernels this CPU can run, the scalar specification first, the widest last.
const std::vector<AttnKernels>& available_attention_kernels();
// The widest of them (what CpuOps uses).
const AttnKernels& active_attention_kernels();

// AVX-512F kernels (attention_avx512.cpp); only called where the CPU has AVX-512F.
void attention_forward_avx512(const AttnHead& h);
void attention_backward_avx512(const AttnHead& h);

}  // namespace amp::cpu
