// Internals of the CPU fused attention (ops_attention.cpp): one (sequence, head) at a time on FP32
// copies of its rows, by the scalar specification of backend/attention_args.h
// (attention_kernels.cpp) or by the tile kernels of attention_tiles.h compiled for AVX2 + FMA
// (attention_kernels.cpp), AVX-512F and AVX-512F + AVX-512-BF16 (attention_avx512.cpp), chosen
// at run time. All of them give the same bits; tests/unit/test_attention.cpp runs each one the CPU
// has against the scalar one. The AVX-512-BF16 set also has the BF16 products (attention_pairs.h),
// the op's default for BF16 there: an exception to the specification, bounded by the same tests.
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
  // BF16 inputs: every dot over D in the specification's pair order (backend/attention_args.h).
  bool pair_dots = false;
  // The same BF16 inputs for the kernel sets with native BF16 dot products (bf16_dots), given
  // only where bf16_dots_allowed holds for both operands of a product (else null: FP32 FMAs):
  const uint16_t* q16 = nullptr;     // [T][Dp] rows: the score product
  const uint32_t* kp16 = nullptr;    // [D/2][Tp] pairs: kp16[p * Tp + j] = k_j's (2p, 2p + 1)
  const uint16_t* dout16 = nullptr;  // [T][Dp] rows: dP (backward)
  const uint32_t* vp16 = nullptr;    // [D/2][Tp] pairs of v_j (backward)
  // For the kernel sets' BF16 products (AttnKernels::forward_bf16_products ...; attention_pairs.h),
  // with all of the above, where bf16_dots_allowed holds for every input of the head:
  const uint16_t* k16 = nullptr;  // [T][Dp] K's rows (backward: dQ)
  const uint16_t* v16 = nullptr;  // [T][Dp] V's rows (forward: P V)
  uint32_t* pairs = nullptr;      // scratch: [ceil(T/2)][Dp] words, once in forward, 3 times in backward
};

struct AttnKernels {
  const char* isa;  // "scalar", "avx2", "avx512", "avx512bf16"
  void (*forward)(const AttnHead&);
  void (*backward)(const AttnHead&);
  bool bf16_dots = false;  // uses q16/kp16/dout16/vp16 when given
  // P and dS rounded to BF16 and every product on VDPBF16PS (backend/attention_args.h's exception
  // for CPUs with AVX-512-BF16): null where the set has no native BF16 products.
  void (*forward_bf16_products)(const AttnHead&) = nullptr;
  void (*backward_bf16_products)(const AttnHead&) = nullptr;
};

// Whether n BF16 values (bit patterns) may enter a native BF16 dot product with the
// specification's bits: each is zero, or finite with |x| >= 2^-55 (backend/attention_args.h).
bool bf16_dots_allowed(const uint16_t* x, int64_t n);

// How many score or dP products of a head the op has run natively so far (ops_attention.cpp;
// for tests).
int64_t attention_native_bf16_products();
// How many heads have run on the BF16 products (forward and backward calls), for tests.
int64_t attention_bf16_product_heads();

constexpr int64_t kAttnPad = 16;  // Dp: D rounded up to this

// The kernels this CPU can run, the scalar specification first, the widest last.
const std::vector<AttnKernels>& available_attention_kernels();
// The widest of them (what CpuOps uses).
const AttnKernels& active_attention_kernels();

// AVX-512F kernels (attention_avx512.cpp); only called where the CPU has AVX-512F.
void attention_forward_avx512(const AttnHead& h);
void attention_backward_avx512(const AttnHead& h);
// AVX-512F + AVX-512-BF16 kernels (the same file), with native BF16 score and dP products; only
// called where the CPU has both and bf16_dot_pairs_match() held.
void attention_forward_avx512bf16(const AttnHead& h);
void attention_backward_avx512bf16(const AttnHead& h);
void attention_forward_avx512bf16_products(const AttnHead& h);
void attention_backward_avx512bf16_products(const AttnHead& h);
// Whether this CPU's VDPBF16PS computes fma(x0, y0, fma(x1, y1, a)) on a fixed set of random
// normal inputs (what the native products rely on; checked once before they are offered).
bool bf16_dot_pairs_match();

}  // namespace amp::cpu
