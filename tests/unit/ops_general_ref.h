// Host-side references for the general ops (backend/ops_args.h), shared by the CPU unit tests
// (tests/unit/test_ops_general.cpp) and the CUDA tests (tests/gpu/test_ops_general.cpp):
// typed host buffers, GEMM cases laid out with padded leading dimensions, batch gaps and
// broadcast strides, a double-precision GEMM reference with an error bound derived from the
// formats, and the exact (bitwise) specifications of add and row_sum.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "backend/ops_args.h"
#include "core/convert.h"
#include "core/half.h"
#include "core/rng.h"

namespace ops_ref {

using amp::DType;

// Unit roundoff (half an ulp at 1) of a format, and half its smallest subnormal (the absolute
// error of rounding a tiny value).
inline double unit_roundoff(DType t) {
  return t == DType::F16 ? 0x1p-11 : t == DType::BF16 ? 0x1p-8 : 0x1p-24;
}
inline double tiny_of(DType t) { return t == DType::F16 ? 0x1p-25 : t == DType::BF16 ? 0x1p-134 : 0x1p-150; }

// A NaN with a payload in the dtype: what padding and never-read outputs are filled with.
inline uint32_t sentinel_bits(DType t) { return t == DType::F32 ? 0x7fc0deadu : t == DType::F16 ? 0x7e5au : 0x7fdau; }

// Values stored in a dtype, as raw bytes (what a device buffer holds).
struct Raw {
  DType t = DType::F32;
  std::vector<unsigned char> bytes;
  Raw() = default;
  Raw(DType dt, size_t n) : t(dt), bytes(n * amp::dtype_size(dt)) {}
  size_t size() const { return bytes.size() / amp::dtype_size(t); }
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
  uint32_t bits(size_t i) const {
    if (t == DType::F32) {
      uint32_t u;
      std::memcpy(&u, &bytes[i * 4], 4);
      return u;
    }
    uint16_t h;
    std::memcpy(&h, &bytes[i * 2], 2);
    return h;
  }
  void set_bits(size_t i, uint32_t b) {
    if (t == DType::F32) {
      std::memcpy(&bytes[i * 4], &b, 4);
    } else {
      const uint16_t h = uint16_t(b);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  float get(size_t i) const {
    float f;
    amp::convert(&bytes[i * amp::dtype_size(t)], t, &f, DType::F32, 1);
    return f;
  }
  void set(size_t i, float f) { amp::convert(&f, DType::F32, &bytes[i * amp::dtype_size(t)], t, 1); }
  void fill_bits(uint32_t b) {
    for (size_t i = 0; i < size(); ++i) set_bits(i, b);
  }
};

// Random normal values (times scale) stored in t; never zero, also after rounding (a zero hides
// an unwritten or unread element).
inline void fill_random(Raw& r, uint64_t seed, double scale = 1.0) {
  amp::Rng rng(seed);
  for (size_t i = 0; i < r.size(); ++i) {
    r.set(i, float(scale * rng.normal()));
    if (r.get(i) == 0.0f) r.set(i, float(1e-3 * scale));
  }
}

// ---------------------------------------------------------------- GEMM

// How a case lays its operands out: padding added to each leading dimension, a gap between
// consecutive matrices of a batch, stride-0 broadcasts, and an offset of the first element
// (1 element: pointers below the usual alignment).
struct GemmLayout {
  int64_t pad_a = 0, pad_b = 0, pad_c = 0;
  int64_t gap = 0;
  bool broadcast_a = false, broadcast_b = false;
  int64_t front = 0;
};

// Host buffers of one case and its arguments with offsets instead of pointers (element offsets of
// matrix 0 in each buffer); bind() makes pointers for a given set of base addresses.
struct GemmCase {
  amp::GemmArgs g;  // A/B/C null until bind()
  Raw a, b, c0;     // c0: C before the call
  int64_t off_a = 0, off_b = 0, off_c = 0;
  std::string name;

  amp::GemmArgs bind(const void* a_base, const void* b_base, void* c_base) const {
    amp::GemmArgs r = g;
    r.A = static_cast<const char*>(a_base) + off_a * int64_t(amp::dtype_size(g.ab));
    r.B = static_cast<const char*>(b_base) + off_b * int64_t(amp::dtype_size(g.ab));
    r.C = static_cast<char*>(c_base) + off_c * int64_t(amp::dtype_size(g.c));
    return r;
  }
};

// Elements spanned by nb matrices of rows x cols with leading dimension ld and batch stride s.
inline int64_t extent(int64_t nb, int64_t rows, int64_t cols, int64_t ld, int64_t s) {
  if (nb == 0 || rows == 0 || cols == 0) return 0;
  return (nb - 1) * s + (rows - 1) * ld + cols;
}

inline std::string describe(const amp::GemmArgs& g) {
  std::ostringstream os;
  os << "m=" << g.m << " n=" << g.n << " k=" << g.k << " batch=" << g.batch << " trans " << (g.trans_a ? 'T' : 'N')
     << (g.trans_b ? 'T' : 'N') << " " << amp::dtype_name(g.ab) << "->" << amp::dtype_name(g.c) << " alpha=" << g.alpha
     << " beta=" << g.beta << " ld " << g.lda << "/" << g.ldb << "/" << g.ldc << " strides " << g.stride_a << "/"
     << g.stride_b << "/" << g.stride_c;
  return os.str();
}

// A case with random A and B, and C either random (beta != 0) or all sentinel NaN (beta == 0:
// C must not be read). Every element of C's buffer outside the matrices holds the sentinel too.
inline GemmCase make_gemm_case(int64_t m, int64_t n, int64_t k, int64_t batch, bool ta, bool tb, DType ab, DType c,
                               float alpha, float beta, const GemmLayout& lay, uint64_t seed) {
  GemmCase cs;
  amp::GemmArgs& g = cs.g;
  g.m = m, g.n = n, g.k = k, g.batch = batch, g.trans_a = ta, g.trans_b = tb, g.ab = ab, g.c = c;
  g.alpha = alpha, g.beta = beta;
  g.lda = g.a_cols() + lay.pad_a;
  g.ldb = g.b_cols() + lay.pad_b;
  g.ldc = n + lay.pad_c;
  g.stride_a = lay.broadcast_a ? 0 : g.a_rows() * g.lda + lay.gap;
  g.stride_b = lay.broadcast_b ? 0 : g.b_rows() * g.ldb + lay.gap;
  g.stride_c = m * g.ldc + lay.gap;
  const int64_t nba = lay.broadcast_a ? 1 : batch, nbb = lay.broadcast_b ? 1 : batch;
  cs.off_a = cs.off_b = cs.off_c = lay.front;
  // A trailing element past each extent: an overrun shows up in C's, and costs nothing in A's/B's.
  cs.a = Raw(ab, size_t(lay.front + extent(nba, g.a_rows(), g.a_cols(), g.lda, g.stride_a) + 1));
  cs.b = Raw(ab, size_t(lay.front + extent(nbb, g.b_rows(), g.b_cols(), g.ldb, g.stride_b) + 1));
  cs.c0 = Raw(c, size_t(lay.front + extent(batch, m, n, g.ldc, g.stride_c) + 1));
  fill_random(cs.a, seed * 3 + 1);
  fill_random(cs.b, seed * 3 + 2, 1.0 / std::sqrt(double(std::max<int64_t>(k, 1))));
  cs.c0.fill_bits(sentinel_bits(c));
  if (beta != 0.0f) {
    Raw r(c, cs.c0.size());
    fill_random(r, seed * 3 + 3);
    for (int64_t bi = 0; bi < batch; ++bi)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const size_t e = size_t(cs.off_c + bi * g.stride_c + i * g.ldc + j);
          cs.c0.set_bits(e, r.bits(e));
        }
  }
  cs.name = describe(g) + " front " + std::to_string(lay.front) + " gap " + std::to_string(lay.gap);
  return cs;
}

struct GemmCheck {
  size_t bad = 0, untouched_bad = 0, checked = 0;
  double worst = 0;  // largest |got - ref| / tol
  std::string first;
};

// Checks C after the call against the double-precision reference computed from the stored
// operands: |got - ref| <= tol with
//   e_acc = acc_factor * (k + 3) * 2^-24 * (|alpha| sum_p |a_ip b_pj| + |beta c_ij|)
//           (any FP32 summation order, the alpha product and the beta term),
//   tol   = e_acc + u_out * (|ref| + e_acc) + tiny_out            (C's one rounding).
// Every element of C's buffer outside the matrices must keep its bits. acc_factor is 1 for a
// rigorous bound; device tensor cores may accumulate with truncation and get a small factor.
inline GemmCheck check_gemm(const GemmCase& cs, const Raw& got, double acc_factor = 1.0) {
  const amp::GemmArgs& g = cs.g;
  GemmCheck r;
  REQUIRE(got.size() == cs.c0.size());
  std::vector<char> inside(got.size(), 0);
  const double u_out = unit_roundoff(g.c), tiny = tiny_of(g.c);
  // Each product's operands as doubles, A's rows and B's columns contiguous over the sum, so that
  // the dot products below stream them in vector registers (their double sums, in any order, are
  // 2^29 times finer than the bound).
  std::vector<double> ad(size_t(g.m * g.k)), bd(size_t(g.n * g.k));
  for (int64_t bi = 0; bi < g.batch; ++bi) {
    const int64_t ba = cs.off_a + bi * g.stride_a, bb = cs.off_b + bi * g.stride_b;
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t p = 0; p < g.k; ++p)
        ad[size_t(i * g.k + p)] = cs.a.get(size_t(ba + (g.trans_a ? p * g.lda + i : i * g.lda + p)));
    for (int64_t j = 0; j < g.n; ++j)
      for (int64_t p = 0; p < g.k; ++p)
        bd[size_t(j * g.k + p)] = cs.b.get(size_t(bb + (g.trans_b ? j * g.ldb + p : p * g.ldb + j)));
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        const double* x = ad.data() + i * g.k;
        const double* y = bd.data() + j * g.k;
        double dot = 0, mag = 0;
#pragma omp simd reduction(+ : dot, mag)
        for (int64_t p = 0; p < g.k; ++p) {
          const double t = x[p] * y[p];
          dot += t;
          mag += std::fabs(t);
        }
        const size_t e = size_t(cs.off_c + bi * g.stride_c + i * g.ldc + j);
        inside[e] = 1;
        const double c0 = g.beta != 0.0f ? double(cs.c0.get(e)) : 0.0;
        const double ref = double(g.alpha) * dot + double(g.beta) * c0;
        const double e_acc = acc_factor * double(g.k + 3) * 0x1p-24 *
                             (std::fabs(double(g.alpha)) * mag + std::fabs(double(g.beta) * c0));
        const double tol = e_acc + u_out * (std::fabs(ref) + e_acc) + tiny;
        const double v = got.get(e);
        const double d = std::fabs(v - ref);
        ++r.checked;
        r.worst = std::max(r.worst, std::isfinite(d) ? d / tol : 1e300);
        if (!(d <= tol) && r.bad++ == 0) {
          std::ostringstream os;
          os << "C[" << bi << "][" << i << "][" << j << "] = " << v << ", reference " << ref << ", tolerance " << tol;
          r.first = os.str();
        }
      }
  }
  for (size_t e = 0; e < got.size(); ++e)
    if (!inside[e] && got.bits(e) != cs.c0.bits(e) && r.untouched_bad++ == 0 && r.first.empty())
      r.first = "element " + std::to_string(e) + " outside the output matrices was written";
  return r;
}

#define OPS_REQUIRE_GEMM(cs, got, factor)                                                                 \
  do {                                                                                                    \
    const ::ops_ref::GemmCheck ops_chk_ = ::ops_ref::check_gemm((cs), (got), (factor));                  \
    INFO((cs).name << ": " << ops_chk_.bad << " of " << ops_chk_.checked << " outside tolerance, "       \
                   << ops_chk_.untouched_bad << " written outside C, worst " << ops_chk_.worst << " x tol; " \
                   << ops_chk_.first);                                                                    \
    REQUIRE(ops_chk_.checked > 0);                                                                        \
    REQUIRE(ops_chk_.bad == 0);                                                                           \
    REQUIRE(ops_chk_.untouched_bad == 0);                                                                 \
  } while (0)

// ---------------------------------------------------------------- add and row_sum

// Same bits, or both NaN (payloads may differ between CPU and GPU NaN generation).
inline bool same_value(const Raw& x, size_t i, const Raw& y, size_t j) {
  const float a = x.get(i), b = y.get(j);
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return x.bits(i) == y.bits(j);
}

// add's specification: one FP32 addition (times scale, an FP32 product, when it is not 1), one
// rounding to out's dtype.
inline Raw add_spec(const Raw& a, const Raw& b, DType out_type, float scale = 1.0f) {
  Raw out(out_type, a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const float sum = a.get(i) + b.get(i);
    out.set(i, scale == 1.0f ? sum : sum * scale);
  }
  return out;
}

// row_sum's specification (backend/ops_args.h): per segment of kRowSumSegment rows, kRowSumLanes
// lane partials in row order added in lane order; the segments' sums in segment order; one
// rounding to out's dtype. col(i) is element i of the column.
template <typename Col>
float row_sum_order(int64_t rows, Col col) {
  float total = 0.0f;
  for (int64_t g0 = 0; g0 < rows; g0 += amp::kRowSumSegment) {
    float p[amp::kRowSumLanes] = {};
    for (int64_t i = g0; i < std::min(rows, g0 + amp::kRowSumSegment); ++i) p[(i - g0) % amp::kRowSumLanes] += col(i);
    float q = 0.0f;
    for (float v : p) q += v;
    total += q;
  }
  return total;
}

inline Raw row_sum_spec(const Raw& x, int64_t rows, int64_t cols, int64_t ldx, DType out_type) {
  Raw out(out_type, size_t(cols));
  for (int64_t j = 0; j < cols; ++j)
    out.set(size_t(j), row_sum_order(rows, [&](int64_t i) { return x.get(size_t(i * ldx + j)); }));
  return out;
}

// The double-precision column sums and the bound of any FP32 summation plus one rounding.
inline void row_sum_double(const Raw& x, int64_t rows, int64_t cols, int64_t ldx, DType out_type,
                           std::vector<double>* ref, std::vector<double>* tol) {
  ref->assign(size_t(cols), 0.0);
  tol->assign(size_t(cols), 0.0);
  for (int64_t j = 0; j < cols; ++j) {
    double s = 0, mag = 0;
    for (int64_t i = 0; i < rows; ++i) {
      const double v = x.get(size_t(i * ldx + j));
      s += v;
      mag += std::fabs(v);
    }
    const double e_acc = double(rows + 1) * 0x1p-24 * mag;
    (*ref)[size_t(j)] = s;
    (*tol)[size_t(j)] = e_acc + unit_roundoff(out_type) * (std::fabs(s) + e_acc) + tiny_of(out_type);
  }
}

}  // namespace ops_ref
