// The fused attention's tile kernels (attention_tiles.h) with AVX-512F: 16 lanes, 64 keys per
// register block. Called only where the CPU has AVX-512F (attention_kernels.cpp checks).
#include "backend/cpu/no_fp_contract.h"  // first: no FMA contraction in this file (explicit FMAs only)

#include "backend/cpu/attention_kernels.h"

#if defined(__AVX2__) && defined(__FMA__)

// GCC 12's AVX-512 headers build "undefined" vectors as `__m512i __Y = __Y;`, which
// -Wmaybe-uninitialized reports at every inlined use (GCC bug 105593, fixed in 12.3); the
// pragma covers the header's own lines, included here first (its guard keeps it from coming back).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "backend/attention_args.h"
#include "backend/cpu/transformer_rows.h"
#include "backend/transformer_args.h"

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
};

#include "backend/cpu/attention_tiles.h"

}  // namespace

void attention_forward_avx512(const AttnHead& h) { AttnTiles<AttnV16>::forward(h); }
void attention_backward_avx512(const AttnHead& h) { AttnTiles<AttnV16>::backward(h); }

}  // namespace amp::cpu

#pragma GCC pop_options

#else

namespace amp::cpu {
void attention_forward_avx512(const AttnHead&) {}
void attention_backward_avx512(const AttnHead&) {}
}  // namespace amp::cpu

#endif
