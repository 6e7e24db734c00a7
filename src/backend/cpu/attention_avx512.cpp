// The fused attention's tile kernels (attention_tiles.h) with AVX-512F: 16 lanes, 64 keys per
// register block; and again with AVX-512-BF16's native dot products. Called only where the CPU
// has AVX-512F (and AVX-512-BF16 for the second set; attention_kernels.cpp checks).
#include "backend/cpu/no_fp_contract.h"  // first: no FMA contraction in this file (explicit FMAs only)

#include "backend/cpu/attention_kernels.h"

#if defined(__AVX2__) && defined(__FMA__)

// GCC 12's AVX-512 headers build "undefined" vectors as `__m512i __Y = __Y;`, which
// -Wmaybe-uninitialized reports at every inlined use (GCC bug 105593, fixed in 12.3), and
// -Wuninitialized where the tiles' loops are compiled as functions of their own; the pragma covers
// the header's own lines, included here first (its guard keeps it from coming back).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <type_traits>

#include "backend/attention_args.h"
#include "backend/cpu/transformer_rows.h"
#include "backend/transformer_args.h"
#include "core/half.h"

// Everything included above keeps the file's own target; only what follows is AVX-512 code, in an
// anonymous namespace so that nothing compiled here can stand in for another file's function.
#pragma GCC push_options
#pragma GCC target("avx512f")

namespace amp::cpu {

namespace {

#include "backend/cpu/exp_avx512.h"

// exp_avx512.h's 16-lane type, with what the tiles add: loads, stores, FMA, exp of arguments <= 0.
struct AttnV16 : V16 {
  static constexpr int W = 16;
  static Vec zero() { return _mm512_setzero_ps(); }
  static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static Vec exp_nonpositive(Vec x) { return exp_f32_16_nonpositive(x); }
  static constexpr bool kBf16Dots = false;
};

#include "backend/cpu/attention_tiles.h"

}  // namespace

void attention_forward_avx512(const AttnHead& h) { AttnTiles<AttnV16>::forward(h); }
void attention_backward_avx512(const AttnHead& h) { AttnTiles<AttnV16>::backward(h); }

}  // namespace amp::cpu

#pragma GCC pop_options

// The same tiles again with AVX-512-BF16: the score and dP products of heads that give native
// pointers (AttnHead::q16 ...) run as VDPBF16PS, 32 products per instruction.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bf16")

namespace amp::cpu {

namespace {
namespace native_bf16 {

struct AttnV16Bf16 : AttnV16 {
  static constexpr bool kBf16Dots = true;
  using Words = __m512i;  // 16 pairs of BF16
  static Words load_words(const uint32_t* p) { return _mm512_loadu_si512(p); }
  // The pair (p[0], p[1]) in every lane.
  static Words set1_pair(const uint16_t* p) {
    int32_t w;
    __builtin_memcpy(&w, p, 4);
    return _mm512_set1_epi32(w);
  }
  // Lane l: fma(a0, b0, fma(a1, b1, acc)) of the lane's pairs (under bf16_dots_allowed's inputs).
  static Vec dot_pairs(Vec acc, Words a, Words b) { return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b); }
  // What the BF16 products add (attention_pairs.h):
  static void store_words(uint32_t* p, Words w) { _mm512_storeu_si512(p, w); }
  // Lane l: the pair (lo_l, hi_l) of two vectors of 16 BF16 values.
  static Words pair_words(__m256i lo, __m256i hi) {
    return _mm512_or_si512(_mm512_cvtepu16_epi32(lo), _mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
  }
  // 16 floats rounded to BF16 (to nearest even; VCVTNEPS2BF16 flushes subnormals to zero).
  static __m256i round16(Vec x) { return (__m256i)_mm512_cvtneps_pbh(x); }
  // x with the lanes from `keep` on (keep <= 0: all of them) set to +0.
  static Vec first_lanes(Vec x, int keep) {
    const __mmask16 m = keep >= 16 ? __mmask16(0xffff) : keep <= 0 ? __mmask16(0) : __mmask16((1u << keep) - 1);
    return _mm512_maskz_mov_ps(m, x);
  }
};

#include "backend/cpu/attention_tiles.h"

}  // namespace native_bf16
}  // namespace

void attention_forward_avx512bf16(const AttnHead& h) { native_bf16::AttnTiles<native_bf16::AttnV16Bf16>::forward(h); }
void attention_backward_avx512bf16(const AttnHead& h) { native_bf16::AttnTiles<native_bf16::AttnV16Bf16>::backward(h); }
void attention_forward_avx512bf16_products(const AttnHead& h) {
  native_bf16::AttnTiles<native_bf16::AttnV16Bf16>::forward_bf16_products(h);
}
void attention_backward_avx512bf16_products(const AttnHead& h) {
  native_bf16::AttnTiles<native_bf16::AttnV16Bf16>::backward_bf16_products(h);
}

bool bf16_dot_pairs_match() {
  // Random normal BF16 values of mixed signs and magnitudes 2^-20 .. 2^20, and random
  // accumulators: the instruction against the two FMAs of the specification, lane by lane.
  uint64_t x = 0x9e3779b97f4a7c15ull;
  const auto next = [&x] { return uint32_t((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 33); };
  const auto value = [&] { return uint16_t((next() & 0x8000u) | ((107u + next() % 41u) << 7) | (next() & 0x7fu)); };
  const auto widen = bf16_bits_to_float;
  for (int round = 0; round < 64; ++round) {
    alignas(64) uint32_t a[16], b[16];
    alignas(64) float acc[16], got[16];
    for (int l = 0; l < 16; ++l) {
      a[l] = value() | uint32_t(value()) << 16, b[l] = value() | uint32_t(value()) << 16;
      acc[l] = widen(value());
    }
    _mm512_store_ps(got, native_bf16::AttnV16Bf16::dot_pairs(_mm512_load_ps(acc), _mm512_load_si512(a), _mm512_load_si512(b)));
    for (int l = 0; l < 16; ++l) {
      const float want = __builtin_fmaf(widen(uint16_t(a[l])), widen(uint16_t(b[l])),
                                        __builtin_fmaf(widen(uint16_t(a[l] >> 16)), widen(uint16_t(b[l] >> 16)), acc[l]));
      if (__builtin_memcmp(&want, &got[l], 4) != 0) return false;
    }
  }
  return true;
}

}  // namespace amp::cpu

#pragma GCC pop_options

#else

namespace amp::cpu {
void attention_forward_avx512(const AttnHead&) {}
void attention_backward_avx512(const AttnHead&) {}
void attention_forward_avx512bf16(const AttnHead&) {}
void attention_backward_avx512bf16(const AttnHead&) {}
void attention_forward_avx512bf16_products(const AttnHead&) {}
void attention_backward_avx512bf16_products(const AttnHead&) {}
bool bf16_dot_pairs_match() { return false; }
}  // namespace amp::cpu

#endif
