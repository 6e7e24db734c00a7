// Arguments of the general ops a model zoo needs beyond the MLP's linear layers: a strided,
// batched GEMM (attention's Q K^T and softmax(P) V, the linear layers as special cases), an
// elementwise add (residual connections), a column sum over rows (bias gradients) and the softmax
// cross-entropy (its CPU twin in src/backend/cpu/kernels.cpp, its CUDA twin in cuda/loss.cu). Plain
// structs, no virtuals; the CPU twins are in amp::cpu::CpuOps (src/backend/cpu/ops_general.cpp),
// the CUDA twins in amp::cuda::CudaOps (cuda/ops_general.cpp, cuda/ops_general.cu). Both validate
// with the check_args() functions below, so an argument one side refuses the other refuses too.
//
// Numeric semantics shared by both twins (the autocast policy of docs/design.md):
//
// GEMM   C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b]          for b in [0, batch)
//        Every matrix is ROW-MAJOR: element (i, j) of a stored R x Cols matrix X with leading
//        dimension ldx is X[i * ldx + j], and matrix b of a batch starts stride_x elements after
//        matrix b - 1. op(A) is m x k, op(B) is k x n, C is m x n.
//        - A and B have one dtype (ab: F32, F16 or BF16); C is FP32 or A's and B's dtype (the
//          combinations cuBLAS(Lt) has with FP32 compute; an FP32 x FP32 -> 16-bit product is a
//          GEMM into FP32 followed by a cast).
//        - Products and sums in FP32 (16-bit operands are widened exactly; no TF32), then
//          alpha * acc + beta * float(C_old) in FP32 and ONE rounding to C's dtype.
//        - beta == 0: C is only written, never read (it may hold NaN or garbage).
//          beta != 0 with k == 0 gives C = beta * C; beta == 0 with k == 0 gives C = 0.
//        - alpha == 0 is allowed; whether A and B are then read (a NaN in them propagating) is
//          unspecified, as in BLAS.
//        - The summation order is unspecified (it differs between oneDNN and cuBLAS, and between
//          shapes); the error bound is that of any FP32 summation: |err| <= about k * 2^-24 *
//          sum_p |a_ip b_pj| before the output rounding.
//        - stride 0 broadcasts an operand over the batch (e.g. one weight matrix for every batch
//          entry). Batches of A and B may be interleaved or overlap (heads of a [B, T, 3, H, D]
//          buffer: stride D, leading dimension 3 H D). C's matrices must not overlap each other
//          (interleaved is fine: attention's output heads in a [T, H, D] buffer), and C must not
//          overlap A or B.
//        Example, one sequence of T tokens, H heads of width D, qkv stored [T, 3, H, D]:
//          scores = Q K^T / sqrt(D):  m = n = T, k = D, batch = H, trans_b = true,
//                                     A = qkv + 0*H*D, lda = 3HD, stride_a = D,
//                                     B = qkv + 1*H*D, ldb = 3HD, stride_b = D,
//                                     C = scores [H, T, T], ldc = T, stride_c = T*T, alpha = 1/sqrt(D)
//          out = P V:                 m = T, n = D, k = T, batch = H,
//                                     A = P [H, T, T], lda = T, stride_a = T*T,
//                                     B = qkv + 2*H*D, ldb = 3HD, stride_b = D,
//                                     C = out [T, H, D], ldc = HD, stride_c = D
//        The linear layers: y = x W^T is m = rows, n = out, k = in, trans_b = true, batch = 1.
//
// add    out[i] = round(float(a[i]) + float(b[i])) for i in [0, n): each of a, b, out is F32, F16
//        or BF16 on its own; one FP32 addition and one rounding to out's dtype, bit-identical on
//        both twins (up to NaN payloads). With scale != 1: round((float(a[i]) + float(b[i])) *
//        scale), the FP32 product of the sum (gradient accumulation's mean over micro-batches).
//        out may be a or b itself (same pointer and dtype), no other overlap.
//
// softmax_xent  Softmax cross-entropy of rows of logits (row r at logits + r * ld_logits, its
//        first `classes` elements; the elements up to the leading dimension are never read or
//        written: a padded vocabulary's columns). Per row, from the logits widened exactly to
//        FP32 x_j: the softmax of causal_softmax_forward (backend/transformer_args.h) over all
//        `classes` columns with scale 1: m = the 32-lane maximum, e_j = tmath::exp_f32(x_j - m),
//        s = the 32-lane sum of the e_j, p_j = e_j / s (FP32); then in double lse = m + log(s) and
//        the row's loss lse - x[label]. A hit when the label is the first column of the maximum: the
//        first j with x_j == m (x_0 when it is NaN: the sequential arg-max's column). The rows'
//        losses are summed in double in row order and added to *loss_sum once (FP32), the hits to
//        *correct. With dlogits: dlogits[r][j] = round((p_j - [j == label]) * (*scale *
//        inv_count)) in its dtype (FP32 arithmetic, row stride ld_dlogits): the loss-scaled
//        gradient of the mean over 1/inv_count samples. dlogits may be logits itself (same dtype
//        and leading dimension). One exp per logit, in the same lanes as the CUDA twin's warp. A
//        label outside [0, classes) gives the row a NaN loss, no hit, and no -1 term.
//
// row_sum out[j] = sum over i in [0, rows) of x[i * ldx + j] for j in [0, cols): FP32 accumulation
//        in a FIXED order, the same on both twins (bit-identical results, no atomics). The rows
//        are cut into segments of kRowSumSegment consecutive rows (the last may be shorter). In
//        segment g, kRowSumLanes partial sums: lane l adds the segment's rows l, l + kRowSumLanes,
//        ... (counted from its first row) in increasing order starting from +0.0f, and the
//        segment's sum is q_g = ((0 + p_0) + p_1) + ... + p_15. Then out[j] = ((0 + q_0) + q_1) +
//        ..., in segment order, rounded once to out's dtype (F32, F16 or BF16). rows == 0 gives 0.
//        Up to kRowSumSegment rows there is one segment: out = q_0. (The segments give a GPU's
//        blocks rows to share: 16 lanes per column alone leave most of a large GPU idle.)
#pragma once

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "core/fp8.h"

namespace amp {

// Segments and lanes of row_sum's fixed summation order (see above). Part of the semantics: the
// CPU and CUDA twins both use them, which is what makes their results bit-identical.
constexpr int64_t kRowSumLanes = 16;
constexpr int64_t kRowSumSegment = 512;
static_assert(kRowSumSegment % kRowSumLanes == 0, "a segment holds whole rounds of the lanes");
inline int64_t row_sum_segments(int64_t rows) { return (rows + kRowSumSegment - 1) / kRowSumSegment; }

struct GemmArgs {
  // Shape: op(A) is m x k, op(B) is k x n, C is m x n; batch matrices of each. Any may be 0
  // (nothing to do, except k == 0: C = beta * C).
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;
  // Transposes: trans_a means A is stored k x m (row-major) and op(A) = A^T; otherwise A is
  // stored m x k. trans_b means B is stored n x k and op(B) = B^T; otherwise B is stored k x n.
  bool trans_a = false, trans_b = false;
  // Scalars, FP32: C = alpha * op(A) op(B) + beta * C; beta == 0 never reads C.
  float alpha = 1.0f, beta = 0.0f;
  // A: first element of matrix 0; lda = elements between consecutive rows of the STORED matrix
  // (>= its row length: m when trans_a, k otherwise); stride_a = elements between consecutive
  // matrices of the batch (0: the same matrix for every b).
  const void* A = nullptr;
  int64_t lda = 0, stride_a = 0;
  // B: the same; lda's rule with the stored row length n (!trans_b) or k (trans_b).
  const void* B = nullptr;
  int64_t ldb = 0, stride_b = 0;
  // C: ldc >= n; stride_c between the batch's output matrices (non-zero when batch > 1).
  void* C = nullptr;
  int64_t ldc = 0, stride_c = 0;
  // Dtypes: ab of A and B (F32, F16, BF16: both operands the same), c of C (F32, or ab).
  DType ab = DType::F32;
  DType c = DType::F32;

  // Stored shapes (row-major rows x row length) of A and B.
  int64_t a_rows() const { return trans_a ? k : m; }
  int64_t a_cols() const { return trans_a ? m : k; }
  int64_t b_rows() const { return trans_b ? n : k; }
  int64_t b_cols() const { return trans_b ? k : n; }
  bool empty() const { return m == 0 || n == 0 || batch == 0; }
};

// GemmArgs from named operands, for call sites with many products (attention's, the LM head's):
//   gemm_of(GemmShape(m, n, k, batch), GemmIn(A, lda, stride_a).t(), GemmIn(B, ldb, stride_b),
//           GemmOut(C, ldc, stride_c), ab, c)
// Each operand carries its memory as stored (first element, elements between rows, between the
// batch's matrices) and, for an input, whether the product reads its transpose (.t()).
struct GemmShape {
  GemmShape(int64_t m_, int64_t n_, int64_t k_, int64_t batch_ = 1) : m(m_), n(n_), k(k_), batch(batch_) {}
  int64_t m, n, k, batch;
};
struct GemmIn {
  GemmIn(const void* p, int64_t ld_, int64_t stride_ = 0) : data(p), ld(ld_), stride(stride_) {}
  GemmIn t() const {
    GemmIn o = *this;
    o.trans = !trans;
    return o;
  }
  const void* data;
  int64_t ld, stride;
  bool trans = false;
};
struct GemmOut {
  GemmOut(void* p, int64_t ld_, int64_t stride_ = 0) : data(p), ld(ld_), stride(stride_) {}
  void* data;
  int64_t ld, stride;
};
inline GemmArgs gemm_of(const GemmShape& s, const GemmIn& a, const GemmIn& b, const GemmOut& c, DType ab, DType c_type) {
  GemmArgs g;
  g.m = s.m, g.n = s.n, g.k = s.k, g.batch = s.batch;
  g.A = a.data, g.lda = a.ld, g.stride_a = a.stride, g.trans_a = a.trans;
  g.B = b.data, g.ldb = b.ld, g.stride_b = b.stride, g.trans_b = b.trans;
  g.C = c.data, g.ldc = c.ld, g.stride_c = c.stride;
  g.ab = ab, g.c = c_type;
  return g;
}

// out = a + b elementwise (see the header comment).
struct AddArgs {
  const void* a = nullptr;
  DType a_type = DType::F32;
  const void* b = nullptr;
  DType b_type = DType::F32;
  void* out = nullptr;
  DType out_type = DType::F32;
  int64_t n = 0;        // elements
  float scale = 1.0f;   // the sum's multiplier (1: none)
};

// out[cols] = column sums of x[rows, cols] (see the header comment).
struct RowSumArgs {
  const void* x = nullptr;
  DType x_type = DType::F32;
  int64_t rows = 0, cols = 0;
  int64_t ldx = 0;  // elements between consecutive rows of x, >= cols
  void* out = nullptr;
  DType out_type = DType::F32;  // FP32 by default (a bias gradient's master copy); F16/BF16 round once
};

// Softmax cross-entropy with its loss sums (see the header comment). Pointers are backend memory.
struct SoftmaxXentArgs {
  const void* logits = nullptr;
  DType logits_type = DType::F32;
  int64_t rows = 0, classes = 0;
  int64_t ld_logits = 0;           // elements between rows of logits, >= classes
  const int32_t* labels = nullptr;  // rows class indices in [0, classes); outside: NaN loss, no hit, no -1 term
  const float* scale = nullptr;     // the loss scale S (backend memory: a captured step reads it)
  float inv_count = 1.0f;           // 1 / (samples the loss is a mean over)
  void* dlogits = nullptr;          // null: loss only (evaluation)
  DType dlogits_type = DType::F32;
  int64_t ld_dlogits = 0;           // elements between rows of dlogits, >= classes
  float* loss_sum = nullptr;        // += the batch's summed loss
  int32_t* correct = nullptr;       // += the batch's hits (may be null)
};

inline bool is_gemm_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// Throws amp::Error (Internal: a caller's bug) naming the first violated rule.
inline void check_args(const GemmArgs& g) {
  AMP_CHECK(g.m >= 0 && g.n >= 0 && g.k >= 0 && g.batch >= 0, "gemm: negative shape m=", g.m, " n=", g.n,
            " k=", g.k, " batch=", g.batch);
  AMP_CHECK(is_gemm_float(g.ab) && (g.c == DType::F32 || g.c == g.ab), "gemm: unsupported dtypes ",
            dtype_name(g.ab), " -> ", dtype_name(g.c), " (C is f32 or the operands' dtype)");
  if (g.empty()) return;
  AMP_CHECK(g.C != nullptr, "gemm: C is null");
  AMP_CHECK(g.ldc >= g.n, "gemm: ldc ", g.ldc, " < n ", g.n);
  AMP_CHECK(g.stride_c >= 0 && (g.batch == 1 || g.stride_c > 0), "gemm: stride_c ", g.stride_c,
            " (must be > 0 when batch > 1)");
  AMP_CHECK(std::isfinite(g.beta) && std::isfinite(g.alpha), "gemm: alpha/beta not finite");
  if (g.k == 0) return;
  AMP_CHECK(g.A != nullptr && g.B != nullptr, "gemm: A or B is null");
  AMP_CHECK(g.lda >= g.a_cols(), "gemm: lda ", g.lda, " < the stored row length ", g.a_cols(),
            g.trans_a ? " (A stored k x m)" : " (A stored m x k)");
  AMP_CHECK(g.ldb >= g.b_cols(), "gemm: ldb ", g.ldb, " < the stored row length ", g.b_cols(),
            g.trans_b ? " (B stored n x k)" : " (B stored k x n)");
  AMP_CHECK(g.stride_a >= 0 && g.stride_b >= 0, "gemm: negative batch stride");
}

inline void check_args(const AddArgs& a) {
  AMP_CHECK(a.n >= 0, "add: negative n ", a.n);
  AMP_CHECK(std::isfinite(a.scale), "add: scale not finite");
  AMP_CHECK(is_gemm_float(a.a_type) && is_gemm_float(a.b_type) && is_gemm_float(a.out_type),
            "add: unsupported dtypes");
  if (a.n == 0) return;
  AMP_CHECK(a.a && a.b && a.out, "add: null pointer");
  AMP_CHECK((a.out != a.a || a.out_type == a.a_type) && (a.out != a.b || a.out_type == a.b_type),
            "add: out aliases an input of another dtype");
}

inline void check_args(const SoftmaxXentArgs& a) {
  AMP_CHECK(a.rows >= 0 && a.classes > 0, "softmax_xent: rows ", a.rows, " classes ", a.classes);
  AMP_CHECK(is_gemm_float(a.logits_type) && (!a.dlogits || is_gemm_float(a.dlogits_type)),
            "softmax_xent: unsupported dtypes");
  AMP_CHECK(a.ld_logits >= a.classes && (!a.dlogits || a.ld_dlogits >= a.classes), "softmax_xent: leading dimension ",
            a.ld_logits, "/", a.ld_dlogits, " below ", a.classes, " classes");
  AMP_CHECK(a.scale && a.loss_sum && (a.rows == 0 || (a.logits && a.labels)), "softmax_xent: null pointer");
  AMP_CHECK(a.dlogits != a.logits || (a.dlogits_type == a.logits_type && a.ld_dlogits == a.ld_logits),
            "softmax_xent: dlogits aliases logits with another dtype or leading dimension");
}

inline void check_args(const RowSumArgs& r) {
  AMP_CHECK(r.rows >= 0 && r.cols >= 0, "row_sum: negative shape");
  AMP_CHECK(is_gemm_float(r.x_type) && is_gemm_float(r.out_type), "row_sum: unsupported dtypes");
  if (r.cols == 0) return;
  AMP_CHECK(r.out != nullptr && (r.rows == 0 || r.x != nullptr), "row_sum: null pointer");
  AMP_CHECK(r.ldx >= r.cols, "row_sum: ldx ", r.ldx, " < cols ", r.cols);
}

// FP8 quantization of a linear layer's operand (amp/fp8_scaling.h, the precision.compute fp8 mode):
// dst[i] = fp8_quantized(float(src[i]), *scale, 1 / *scale, format), rounded to dst_type (exact for
// BF16 and FP32: the scale is a power of two). In place (dst == src) is allowed. Optional outputs,
// sums and maxima of integers, so the same in any order:
//   amax:   *amax = max(*amax, amax_bits(|src[i]|)) over i (int32 words; NaN above infinity);
//   counts: counts[0] += n; counts[1] += finite non-zero values that became 0 (flushed);
//           counts[2] += finite values with |x * scale| > fp8_max(format) (saturated).
struct Fp8QuantizeArgs {
  const void* src = nullptr;
  DType src_type = DType::BF16;
  void* dst = nullptr;
  DType dst_type = DType::BF16;
  int64_t n = 0;
  Fp8 format = Fp8::E4M3;
  const float* scale = nullptr;  // backend memory: a power of two (pow2_floor)
  int32_t* amax = nullptr;
  int64_t* counts = nullptr;
};

inline void check_args(const Fp8QuantizeArgs& a) {
  AMP_CHECK(a.n >= 0 && a.scale != nullptr && (a.n == 0 || (a.src != nullptr && a.dst != nullptr)),
            "fp8_quantize: null pointer or negative count");
  AMP_CHECK(a.dst_type != DType::F16, "fp8_quantize: the dequantized operand is BF16 or FP32 (exact), not ",
            dtype_name(a.dst_type));
}

// FP8 codes of a row-major rows x cols operand (the native FP8 GEMM's inputs): codes[i][j] =
// float_to_fp8(float(src[i][j]) * *scale, format, saturating) for finite values, the format's NaN
// (E4M3) or the value's infinity / NaN code (E5M2) otherwise (core/fp8.h); codes_t, when given, the
// same codes transposed (cols x rows), the layout an FP8 GEMM needs for an operand whose reduction
// dimension is its rows. amax and counts as Fp8QuantizeArgs's. Decoded and divided by the scale,
// a code is exactly fp8_quantized's value (amp/fp8_scaling.h).
struct Fp8CastArgs {
  const void* src = nullptr;
  DType src_type = DType::BF16;
  int64_t rows = 0, cols = 0;
  Fp8 format = Fp8::E4M3;
  const float* scale = nullptr;  // backend memory, a power of two
  uint8_t* codes = nullptr;      // rows x cols (optional)
  uint8_t* codes_t = nullptr;    // cols x rows (optional)
  int32_t* amax = nullptr;
  int64_t* counts = nullptr;
};

inline void check_args(const Fp8CastArgs& a) {
  AMP_CHECK(a.rows >= 0 && a.cols >= 0 && a.scale != nullptr && (a.codes || a.codes_t) &&
                (a.rows * a.cols == 0 || a.src != nullptr),
            "fp8_cast: null pointer, no output or negative shape");
}

// The FP8 GEMM with per-tensor scales (an FP8 linear layer's three products are all of this
// form, with transposed codes where the reduction runs over rows): row-major
//   C[i][j] = (sum over l of dec(A[i][l]) dec(B[j][l])) / (*a_scale * *b_scale) + bias[j]
// A: m x k codes, B: n x k codes (both k-contiguous), FP32 accumulation, C rounded once to c_type
// (BF16 or FP32); bias (n elements of c_type) optional. With power-of-two scales this is exactly
// the compute-dtype GEMM on fp8_quantized operands (up to summation order): the CPU twin runs that.
// E5M2 x E5M2 is refused (Hopper's FP8 GEMMs have no such kernel; no linear layer needs one).
struct Fp8GemmArgs {
  int64_t m = 0, n = 0, k = 0;
  const uint8_t* a = nullptr;
  Fp8 a_format = Fp8::E4M3;
  const uint8_t* b = nullptr;
  Fp8 b_format = Fp8::E4M3;
  const float* a_scale = nullptr;  // backend memory: the casts' scales (powers of two)
  const float* b_scale = nullptr;
  const float* a_inv_scale = nullptr;  // 1 / scale each (what cuBLASLt's scale pointers take)
  const float* b_inv_scale = nullptr;
  const void* bias = nullptr;
  void* c = nullptr;
  DType c_type = DType::BF16;
};

inline void check_args(const Fp8GemmArgs& g) {
  AMP_CHECK(g.m >= 0 && g.n >= 0 && g.k >= 0 && g.a_scale && g.b_scale && g.a_inv_scale && g.b_inv_scale &&
                (g.m * g.n == 0 || g.c != nullptr) && (g.m * g.n * g.k == 0 || (g.a != nullptr && g.b != nullptr)),
            "fp8_gemm: null pointer or negative shape");
  AMP_CHECK(!(g.a_format == Fp8::E5M2 && g.b_format == Fp8::E5M2), "fp8_gemm: E5M2 x E5M2 has no FP8 GEMM");
  AMP_CHECK(g.c_type == DType::BF16 || g.c_type == DType::F32, "fp8_gemm: C is BF16 or FP32, not ", dtype_name(g.c_type));
}

}  // namespace amp
