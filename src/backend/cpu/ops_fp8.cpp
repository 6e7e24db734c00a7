// The FP8 quantization op on the CPU (backend/ops_args.h, Fp8QuantizeArgs): the scalar
// specification of amp/fp8_scaling.h element by element, blocks of elements in parallel; the amax
// (a maximum of int32 words) and the counts (integer sums) combine in any order to the same result.
#include <algorithm>
#include <cmath>
#include <vector>

#include "amp/fp8_scaling.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/float_rows.h"
#include "core/convert.h"
#include "core/half.h"

namespace amp::cpu {

namespace {
constexpr int64_t kBlock = 2048;
constexpr int64_t kParallelMin = 4 * kBlock;

// fp8_quantized (amp/fp8_scaling.h) over a row, branch-free so that the compiler vectorizes it;
// bit-identical to the specification (tests/unit/test_fp8.cpp compares them). For v = |x| * scale:
// at or above the smallest normal 2^emin, round the FP32 significand to M bits (to nearest even, by
// adding half an FP8 step less one, plus the kept last bit, and masking); below it, add and subtract
// C = 2^(emin - M + 23), whose FP32 step is the FP8 subnormal step, so FP32's own round-to-nearest-
// even rounds to it; then clamp to the format's maximum (saturation) and restore the sign.
// Non-finite x pass through. Returns the flushed and saturated counts.
void quantize_row(const float* x, float* out, int64_t len, float scale, float inv, Fp8 f, int32_t* amax,
                  int64_t* flushed, int64_t* saturated) {
  const int M = f == Fp8::E4M3 ? 3 : 2, emin = f == Fp8::E4M3 ? -6 : -14;
  const uint32_t drop = 23u - uint32_t(M), low = (1u << drop) - 1u, half = low >> 1;
  const float min_normal = f32_from_bits(uint32_t(127 + emin) << 23);
  const float C = f32_from_bits(uint32_t(127 + emin - M + 23) << 23);
  const float fmax = fp8_max(f);
  const uint32_t fmax_bits = f32_bits(fmax);
  int32_t m = *amax, fl = 0, sat = 0;  // len <= kBlock: the counts fit
  for (int64_t i = 0; i < len; ++i) {
    const uint32_t xb = f32_bits(x[i]);
    const uint32_t ab = xb & 0x7fffffffu;
    m = std::max(m, int32_t(ab));
    const float v = f32_from_bits(ab) * scale;  // |x| * scale, exact (a power of two)
    const uint32_t vb = f32_bits(v);
    const uint32_t normal = (vb + half + ((vb >> drop) & 1u)) & ~low;
    const uint32_t sub = f32_bits((v + C) - C);
    // Selections as masks (no branches: the loop vectorizes).
    const uint32_t is_normal = 0u - uint32_t(v >= min_normal);
    uint32_t r = (normal & is_normal) | (sub & ~is_normal);
    const uint32_t over = 0u - uint32_t(f32_from_bits(r) > fmax);
    r = (fmax_bits & over) | (r & ~over);
    const uint32_t finite = 0u - uint32_t(ab < 0x7f800000u);
    fl += int32_t(finite & uint32_t(r == 0u) & uint32_t(ab != 0u));
    sat += int32_t(finite & uint32_t(v > fmax));
    const uint32_t q = f32_bits(f32_from_bits(r) * inv) | (xb & 0x80000000u);
    out[i] = f32_from_bits((q & finite) | (xb & ~finite));
  }
  *amax = m;
  *flushed += fl;
  *saturated += sat;
}
}  // namespace

void CpuOps::fp8_quantize(const Fp8QuantizeArgs& a) {
  check_args(a);
  const float scale = *a.scale, inv = 1.0f / scale;
  const int64_t n = a.n, nb = (n + kBlock - 1) / kBlock;
  int32_t amax = 0;
  int64_t flushed = 0, saturated = 0;
#pragma omp parallel for schedule(static) reduction(max : amax) reduction(+ : flushed, saturated) if (n >= kParallelMin)
  for (int64_t blk = 0; blk < nb; ++blk) {
    alignas(64) float v[kBlock];
    const int64_t off = blk * kBlock, len = std::min(kBlock, n - off);
    const float* x = row_in(a.src, a.src_type, off, len, v);
    float* out = row_out(a.dst, a.dst_type, off, v);
    int32_t m = 0;
    int64_t fl = 0, sat = 0;
    quantize_row(x, out, len, scale, inv, a.format, &m, &fl, &sat);
    amax = std::max(amax, m);
    flushed += fl, saturated += sat;
    row_store(v, a.dst, a.dst_type, off, len);
  }
  if (a.amax) *a.amax = std::max(*a.amax, amax);
  if (a.counts) a.counts[0] += n, a.counts[1] += flushed, a.counts[2] += saturated;
}

}  // namespace amp::cpu

namespace amp::cpu {

// The codes of the specification element by element (the native path is the GPU's; on the CPU it
// serves the tests that check the linear layers' plumbing of it).
void CpuOps::fp8_cast(const Fp8CastArgs& a) {
  check_args(a);
  const float scale = *a.scale;
  int32_t amax = 0;
  int64_t flushed = 0, saturated = 0;
  std::vector<float> row(size_t(a.cols));
  for (int64_t i = 0; i < a.rows; ++i) {
    convert(at(a.src, a.src_type, i * a.cols), a.src_type, row.data(), DType::F32, size_t(a.cols));
    for (int64_t j = 0; j < a.cols; ++j) {
      const float x = row[size_t(j)];
      amax = std::max(amax, amax_bits(x));
      const bool finite = x - x == 0.0f;
      const uint8_t code = finite ? float_to_fp8(x * scale, a.format, true) : float_to_fp8(x, a.format, false);
      if (finite) {
        flushed += (code & 0x7fu) == 0 && x != 0.0f;
        saturated += std::fabs(x * scale) > fp8_max(a.format);
      }
      if (a.codes) a.codes[i * a.cols + j] = code;
      if (a.codes_t) a.codes_t[j * a.rows + i] = code;
    }
  }
  if (a.amax) *a.amax = std::max(*a.amax, amax);
  if (a.counts) a.counts[0] += a.rows * a.cols, a.counts[1] += flushed, a.counts[2] += saturated;
}

// The dequantized operands (code / scale, exact in BF16) through the BF16 GEMM: with a bias the
// linear layer's forward op, without one the general GEMM (C = A B^T).
void CpuOps::fp8_gemm(const Fp8GemmArgs& g) {
  check_args(g);
  AMP_CHECK(!g.bias || g.c_type == DType::BF16, "fp8_gemm: a bias needs a BF16 C");
  if (g.m == 0 || g.n == 0) return;
  const auto dequantized = [](const uint8_t* codes, Fp8 f, float scale, int64_t n) {
    std::vector<uint16_t> v(static_cast<size_t>(n));
    const float inv = 1.0f / scale;
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float_to_bf16_bits(fp8_to_float(codes[i], f) * inv);
    return v;
  };
  std::vector<uint16_t> a = dequantized(g.a, g.a_format, *g.a_scale, g.m * g.k);
  std::vector<uint16_t> b = dequantized(g.b, g.b_format, *g.b_scale, g.n * g.k);
  const size_t m = size_t(g.m), n = size_t(g.n), k = size_t(g.k);
  if (g.bias) {
    linear_forward(Tensor{a.data(), DType::BF16, m, k}, Tensor{b.data(), DType::BF16, n, k},
                   Tensor{const_cast<void*>(g.bias), DType::BF16, 1, n}, Tensor{g.c, g.c_type, m, n});
    return;
  }
  gemm(gemm_of(GemmShape(g.m, g.n, g.k), GemmIn(a.data(), g.k), GemmIn(b.data(), g.k).t(), GemmOut(g.c, g.n),
               DType::BF16, g.c_type));
}

}  // namespace amp::cpu
