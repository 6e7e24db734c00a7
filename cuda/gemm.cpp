#include "cuda/gemm.h"

#include "core/error.h"
#include "cuda/cublaslt_util.h"

namespace amp::cuda {

// cuBLAS is column-major: a row-major R x C matrix with leading dimension C is, to cuBLAS, the
// C x R matrix (its transpose) with the same leading dimension. With Xc = x^T (in x B, ld in),
// Wc = w^T (in x out, ld in), Yc = y^T (out x B, ld out), and likewise for the gradients:
//   forward         y = x w^T + b   <=>  Yc  = Wc^T * Xc    A = w  (T, stored in x out, lda in)
//                                                           B = x  (N, stored in x B,   ldb in)
//                                                           D = y  (out x B, ldd out); m=out, n=B,   k=in
//   backward input  dx = dy w       <=>  dXc = Wc * dYc     A = w  (N, stored in x out, lda in)
//                                                           B = dy (N, stored out x B,  ldb out)
//                                                           D = dx (in x B, ldd in);   m=in,  n=B,   k=out
//   backward weight dw = dy^T x     <=>  dWc = Xc * dYc^T   A = x  (N, stored in x B,   lda in)
//                                                           B = dy (T, stored out x B,  ldb out)
//                                                           D = dw (in x out, ldd in); m=in,  n=out, k=B
// The bias (one per output feature) is one value per row of Yc: the BIAS epilogue's broadcast.
GemmCall linear_forward_call(const Tensor& x, const Tensor& w, const Tensor& y) {
  const size_t batch = x.rows, in = x.cols, out = w.rows;
  GemmCall c;
  c.trans_a = true;
  c.trans_b = false;
  c.m = out, c.n = batch, c.k = in;
  c.a = w.data, c.lda = int64_t(in);
  c.b = x.data, c.ldb = int64_t(in);
  c.d = y.data, c.ldd = int64_t(out);
  c.ab = x.dtype, c.dt = y.dtype;
  return c;
}

GemmCall linear_backward_input_call(const Tensor& dy, const Tensor& w, const Tensor& dx) {
  const size_t batch = dy.rows, in = w.cols, out = w.rows;
  GemmCall c;
  c.trans_a = false;
  c.trans_b = false;
  c.m = in, c.n = batch, c.k = out;
  c.a = w.data, c.lda = int64_t(in);
  c.b = dy.data, c.ldb = int64_t(out);
  c.d = dx.data, c.ldd = int64_t(in);
  c.ab = dy.dtype, c.dt = dx.dtype;
  return c;
}

GemmCall linear_backward_weight_call(const Tensor& dy, const Tensor& x, const Tensor& dw) {
  const size_t batch = dy.rows, in = x.cols, out = dy.cols;
  GemmCall c;
  c.trans_a = false;
  c.trans_b = true;
  c.m = in, c.n = out, c.k = batch;
  c.a = x.data, c.lda = int64_t(in);
  c.b = dy.data, c.ldb = int64_t(out);
  c.d = dw.data, c.ldd = int64_t(in);
  c.ab = dy.dtype, c.dt = dw.dtype;
  return c;
}

struct LtGemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    const auto warn = [](cublasStatus_t s, const char* what) {
      if (s != CUBLAS_STATUS_SUCCESS) warn_device_error(__FILE__, __LINE__, what, cublas_error_string(s));
    };
    if (a) warn(cublasLtMatrixLayoutDestroy(a), "cublasLtMatrixLayoutDestroy(a)");
    if (b) warn(cublasLtMatrixLayoutDestroy(b), "cublasLtMatrixLayoutDestroy(b)");
    if (d) warn(cublasLtMatrixLayoutDestroy(d), "cublasLtMatrixLayoutDestroy(d)");
    if (desc) warn(cublasLtMatmulDescDestroy(desc), "cublasLtMatmulDescDestroy");
  }
};

LtGemm::LtGemm(size_t workspace_bytes) : workspace_(workspace_bytes), scale_slots_(8) {}

// The heuristic's first algorithm for the plan's descriptor and layouts (C and D alike), under the
// project's preferences; false (and why, when asked) when it has none.
bool LtGemm::pick_algorithm(Plan& p, uint32_t align_a, uint32_t align_b, uint32_t align_d, std::string* why) {
  cublasLtMatmulPreference_t pref = nullptr;
  AMP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t st = set_preferences(pref, workspace_.bytes(), align_a, align_b, align_d);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(handle_.get(), p.desc, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    if (why) *why = st != CUBLAS_STATUS_SUCCESS ? cublas_error_string(st) : std::string("no heuristic result");
    return false;
  }
  p.algo = result.algo;
  return true;
}
LtGemm::~LtGemm() = default;

LtGemm::Key LtGemm::key_of(const GemmCall& c) const {
  return Key{c.trans_a, c.trans_b, c.m, c.n, c.k, c.lda, c.ldb, c.ldd, int(c.ab), int(c.dt), c.bias != nullptr,
             alignment_of(c.a), alignment_of(c.b), alignment_of(c.d), c.bias ? alignment_of(c.bias) : 0u};
}

LtGemm::Plan* LtGemm::find_plan(const GemmCall& c, std::string* why) {
  const Key key = key_of(c);
  auto it = plans_.find(key);
  if (it != plans_.end()) {
    if (!it->second && why) *why = "no heuristic result";
    return it->second.get();
  }

  auto p = std::make_unique<Plan>();
  AMP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const int32_t ta = c.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = c.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, ta);
  set_desc(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, tb);
  if (c.bias) {
    // The bias has D's dtype (cuBLASLt's default for the BIAS epilogue, so no BIAS_DATA_TYPE).
    set_desc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_BIAS));
    set_desc(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, c.bias);  // its alignment guides the heuristic
  }
  // Stored shapes: A is (k x m) when transposed, else (m x k); B is (n x k) when transposed, else (k x n).
  AMP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, cuda_type(c.ab), c.trans_a ? c.k : c.m, c.trans_a ? c.m : c.k, c.lda));
  AMP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, cuda_type(c.ab), c.trans_b ? c.n : c.k, c.trans_b ? c.k : c.n, c.ldb));
  AMP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d, cuda_type(c.dt), c.m, c.n, c.ldd));

  if (!pick_algorithm(*p, alignment_of(c.a), alignment_of(c.b), alignment_of(c.d), why)) {
    plans_.emplace(key, nullptr);
    return nullptr;
  }
  return plans_.emplace(key, std::move(p)).first->second.get();
}

LtGemm::Plan& LtGemm::plan_for(const GemmCall& c) {
  std::string why;
  Plan* p = find_plan(c, &why);
  if (!p)
    throw Error(ErrorKind::Device,
                strcat("cuBLASLt has no algorithm for the GEMM m=", c.m, " n=", c.n, " k=", c.k, " (", dtype_name(c.ab),
                       " operands, ", dtype_name(c.dt), " output", c.bias ? ", bias epilogue" : "", ", trans ",
                       c.trans_a ? "T" : "N", c.trans_b ? "T" : "N", ", ld ", c.lda, "/", c.ldb, "/", c.ldd, "): ", why));
  return *p;
}

bool LtGemm::supported(const GemmCall& c) { return c.m == 0 || c.n == 0 || c.k == 0 || find_plan(c, nullptr); }

void LtGemm::run(const GemmCall& c, cudaStream_t stream) {
  if (c.m == 0 || c.n == 0) return;
  if (c.k == 0) {  // an empty sum: D = bias (not needed by the backend) or 0
    AMP_CHECK(!c.bias, "gemm: k = 0 with a bias");
    AMP_CUDA_CHECK(cudaMemset2DAsync(c.d, size_t(c.ldd) * dtype_size(c.dt), 0, c.m * dtype_size(c.dt), c.n, stream));
    return;
  }
  Plan& p = plan_for(c);
  if (c.bias) set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, c.bias);
  const float alpha = 1.0f, beta = 0.0f;
  AMP_CUBLAS_CHECK(cublasLtMatmul(handle_.get(), p.desc, &alpha, c.a, p.a, c.b, p.b, &beta, c.d, p.d, c.d, p.d, &p.algo,
                              workspace_.get(), workspace_.bytes(), stream));
}

namespace {
cudaDataType_t fp8_type(Fp8 f) { return f == Fp8::E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }
}  // namespace

LtGemm::Plan* LtGemm::find_fp8_plan(const Fp8GemmArgs& g, std::string* why) {
  const Fp8Key key{g.m, g.n, g.k, int(g.a_format), int(g.b_format), int(g.c_type), g.bias != nullptr,
                   alignment_of(g.a), alignment_of(g.b), alignment_of(g.c)};
  auto it = fp8_plans_.find(key);
  if (it != fp8_plans_.end()) {
    if (!it->second && why) *why = "no heuristic result";
    return it->second.get();
  }
  auto p = std::make_unique<Plan>();
  AMP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, int32_t(CUBLAS_OP_T));  // FP8 GEMMs take "TN" only
  set_desc(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, int32_t(CUBLAS_OP_N));
  set_desc(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, g.b_inv_scale);  // set again per call
  set_desc(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, g.a_inv_scale);
  if (g.bias) {
    set_desc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_BIAS));
    set_desc(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(CUDA_R_16BF));
    set_desc(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  }
  // cuBLAS's A: our B stored k x n (ld k), transposed; its B: our A stored k x m (ld k); D: n x m (ld n).
  AMP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, fp8_type(g.b_format), uint64_t(g.k), uint64_t(g.n), g.k));
  AMP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, fp8_type(g.a_format), uint64_t(g.k), uint64_t(g.m), g.k));
  AMP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d, cuda_type(g.c_type), uint64_t(g.n), uint64_t(g.m), g.n));
  if (!pick_algorithm(*p, alignment_of(g.b), alignment_of(g.a), alignment_of(g.c), why)) {
    fp8_plans_.emplace(key, nullptr);
    return nullptr;
  }
  return fp8_plans_.emplace(key, std::move(p)).first->second.get();
}

// cuBLASLt refuses an FP8 GEMM whose scale pointers are not 16-byte aligned: every algorithm its
// heuristic offers fails with CUBLAS_STATUS_NOT_SUPPORTED at the call (seen with cuBLASLt 13.1 on
// an H200, where 16-byte aligned scales ran every one). The FP8 state keeps its scales 4 bytes
// apart, so an unaligned one is copied, in stream order (a graph captures the copy), to slot `slot`
// of an aligned buffer first.
const float* LtGemm::aligned_scale(const float* scale, int slot, cudaStream_t stream) {
  if (reinterpret_cast<uintptr_t>(scale) % 16 == 0) return scale;
  float* dst = scale_slots_.get() + 4 * slot;
  AMP_CUDA_CHECK(cudaMemcpyAsync(dst, scale, sizeof(float), cudaMemcpyDeviceToDevice, stream));
  return dst;
}

bool LtGemm::supported_fp8(const Fp8GemmArgs& g) {
  return g.m == 0 || g.n == 0 || g.k == 0 || find_fp8_plan(g, nullptr);
}

void LtGemm::run_fp8(const Fp8GemmArgs& g, cudaStream_t stream) {
  check_args(g);
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0) {
    AMP_CHECK(!g.bias, "fp8_gemm: k = 0 with a bias");
    AMP_CUDA_CHECK(cudaMemsetAsync(g.c, 0, size_t(g.m * g.n) * dtype_size(g.c_type), stream));
    return;
  }
  std::string why;
  Plan* p = find_fp8_plan(g, &why);
  if (!p)
    throw Error(ErrorKind::Device, strcat("cuBLASLt has no FP8 algorithm for the GEMM m=", g.m, " n=", g.n, " k=", g.k,
                                          " (", g.a_format == Fp8::E4M3 ? "e4m3" : "e5m2", " x ",
                                          g.b_format == Fp8::E4M3 ? "e4m3" : "e5m2", "): ", why));
  set_desc(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, aligned_scale(g.b_inv_scale, 0, stream));
  set_desc(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, aligned_scale(g.a_inv_scale, 1, stream));
  if (g.bias) set_desc(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t st = cublasLtMatmul(handle_.get(), p->desc, &alpha, g.b, p->a, g.a, p->b, &beta, g.c, p->d,
                                           g.c, p->d, &p->algo, workspace_.get(), workspace_.bytes(), stream);
  if (st != CUBLAS_STATUS_SUCCESS)
    throw Error(ErrorKind::Device, strcat("cublasLtMatmul (FP8, m=", g.m, " n=", g.n, " k=", g.k, ", ",
                                          g.bias ? "bias, " : "", dtype_name(g.c_type), " output) failed: ",
                                          cublas_error_string(st), " (bench/gpu/probe_fp8_gemm shows which forms ",
                                          "this GPU and cuBLASLt run)"));
}

}  // namespace amp::cuda
