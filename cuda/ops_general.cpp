#include "cuda/cuda_ops.h"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "cudart/cuda_check.h"
#include "cudart/device_buffer.h"
#include "cuda/cublaslt_util.h"

namespace amp::cuda {

namespace {

void warn_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) warn_device_error(__FILE__, __LINE__, what, cublas_error_string(s));
}

// The row-major problem as cuBLAS's column-major one (see the header): a row-major R x C matrix
// with leading dimension ld is, column-major, the C x R matrix with the same ld, so
//   C^T (n x m, ldc) = op(B)^T (n x k) * op(A)^T (k x m)
// cuBLAS's first operand is our B (stored b_cols x b_rows column-major, transposed when trans_b),
// its second our A (a_cols x a_rows, transposed when trans_a).
struct ColMajor {
  cublasOperation_t op1, op2;
  uint64_t m, n, k;  // cuBLAS's m = our n, n = our m
};
ColMajor col_major(const GemmArgs& g) {
  return {g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, uint64_t(g.n), uint64_t(g.m),
          uint64_t(g.k)};
}

}  // namespace

struct CudaOps::GemmPlans {
  struct Plan {
    bool lt = false;  // cuBLASLt (else cublasGemmStridedBatchedEx)
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t first = nullptr, second = nullptr, c = nullptr;  // cuBLAS's A (our B), B (our A), C/D
    cublasLtMatmulAlgo_t algo{};
    Plan() = default;
    Plan(const Plan&) = delete;
    Plan& operator=(const Plan&) = delete;
    ~Plan() {
      if (first) warn_cublas(cublasLtMatrixLayoutDestroy(first), "cublasLtMatrixLayoutDestroy");
      if (second) warn_cublas(cublasLtMatrixLayoutDestroy(second), "cublasLtMatrixLayoutDestroy");
      if (c) warn_cublas(cublasLtMatrixLayoutDestroy(c), "cublasLtMatrixLayoutDestroy");
      if (desc) warn_cublas(cublasLtMatmulDescDestroy(desc), "cublasLtMatmulDescDestroy");
    }
  };
  using Key = std::array<int64_t, 17>;

  CublasLtHandle lt;
  cublasHandle_t classic = nullptr;
  DeviceBuffer<unsigned char> workspace;
  std::map<Key, std::unique_ptr<Plan>> plans;
  std::mutex mu;
  bool force_cublas = false;

  explicit GemmPlans(size_t workspace_bytes) : workspace(workspace_bytes) {
    AMP_CUBLAS_CHECK(cublasCreate(&classic));
    // Split-K partial sums in FP32, never in a 16-bit output type: C is rounded once.
    AMP_CUBLAS_CHECK(cublasSetMathMode(classic, cublasMath_t(CUBLAS_DEFAULT_MATH |
                                                         CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  }
  ~GemmPlans() {
    if (classic) warn_cublas(cublasDestroy(classic), "cublasDestroy");
  }

  static Key key_of(const GemmArgs& g) {
    return Key{g.m,          g.n,          g.k,      g.batch,   g.trans_a,        g.trans_b,
               g.lda,        g.ldb,        g.ldc,    g.stride_a, g.stride_b,      g.stride_c,
               int64_t(g.ab), int64_t(g.c), int64_t(alignment_of(g.A)), int64_t(alignment_of(g.B)),
               int64_t(alignment_of(g.C))};
  }

  // The plan for g (k > 0, not empty); built on the first call of a signature.
  Plan& plan_for(const GemmArgs& g) {
    const Key key = key_of(g);
    auto it = plans.find(key);
    if (it != plans.end()) return *it->second;
    auto p = std::make_unique<Plan>();
    if (!force_cublas) p->lt = make_lt(g, p.get());
    return *plans.emplace(key, std::move(p)).first->second;
  }

  // Descriptors, layouts and the heuristic's first algorithm; false when cuBLASLt has none.
  bool make_lt(const GemmArgs& g, Plan* p) {
    const ColMajor cm = col_major(g);
    AMP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    set_desc(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, int32_t(cm.op1));
    set_desc(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, int32_t(cm.op2));
    // Stored (column-major) shapes: our B is b_cols x b_rows, our A a_cols x a_rows, C n x m.
    AMP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->first, cuda_type(g.ab), uint64_t(g.b_cols()), uint64_t(g.b_rows()), g.ldb));
    AMP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->second, cuda_type(g.ab), uint64_t(g.a_cols()), uint64_t(g.a_rows()), g.lda));
    AMP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, cuda_type(g.c), uint64_t(g.n), uint64_t(g.m), g.ldc));
    if (g.batch > 1) {
      AMP_CHECK(g.batch <= INT32_MAX, "gemm: batch ", g.batch, " exceeds cuBLASLt's int32 batch count");
      const int32_t count = int32_t(g.batch);
      const std::pair<cublasLtMatrixLayout_t, int64_t> layouts[] = {
          {p->first, g.stride_b}, {p->second, g.stride_a}, {p->c, g.stride_c}};
      for (const auto& [layout, stride] : layouts) {
        set_layout(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count);
        set_layout(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride);  // 0: broadcast
      }
    }
    cublasLtMatmulPreference_t pref = nullptr;
    AMP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    // cuBLAS's A is our B (see the header): the alignments in cuBLAS's order.
    cublasStatus_t st = set_preferences(pref, workspace.bytes(), alignment_of(g.B), alignment_of(g.A), alignment_of(g.C));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulAlgoGetHeuristic(lt.get(), p->desc, p->first, p->second, p->c, p->c, pref, 1, &result, &found);
    warn_cublas(cublasLtMatmulPreferenceDestroy(pref), "cublasLtMatmulPreferenceDestroy");
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) return false;  // the cublasGemmStridedBatchedEx path
    p->algo = result.algo;
    return true;
  }

  void run(const GemmArgs& g, Plan& p, cudaStream_t stream) {
    const float alpha = g.alpha, beta = g.beta;
    if (p.lt) {
      AMP_CUBLAS_CHECK(cublasLtMatmul(lt.get(), p.desc, &alpha, g.B, p.first, g.A, p.second, &beta, g.C, p.c, g.C, p.c,
                                  &p.algo, workspace.get(), workspace.bytes(), stream));
      return;
    }
    const ColMajor cm = col_major(g);
    AMP_CUBLAS_CHECK(cublasSetStream(classic, stream));
    // After cublasSetStream (which resets it): our workspace, so nothing is allocated under capture.
    AMP_CUBLAS_CHECK(cublasSetWorkspace(classic, workspace.get(), workspace.bytes()));
    AMP_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(classic, cm.op1, cm.op2, int64_t(cm.m), int64_t(cm.n), int64_t(cm.k),
                                               &alpha, g.B, cuda_type(g.ab), g.ldb, g.stride_b, g.A, cuda_type(g.ab),
                                               g.lda, g.stride_a, &beta, g.C, cuda_type(g.c), g.ldc, g.stride_c,
                                               g.batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
};

void CudaOps::GemmPlansDeleter::operator()(GemmPlans* p) const { delete p; }

std::unique_ptr<CudaOps::GemmPlans, CudaOps::GemmPlansDeleter> CudaOps::make_gemm_plans(size_t workspace_bytes) {
  return std::unique_ptr<GemmPlans, GemmPlansDeleter>(new GemmPlans(workspace_bytes));
}

void CudaOps::set_force_cublas(bool on) {
  std::lock_guard<std::mutex> lock(plans_->mu);
  if (on != plans_->force_cublas) plans_->plans.clear();
  plans_->force_cublas = on;
}

std::string CudaOps::gemm_path(const GemmArgs& g) {
  check_args(g);
  if (g.empty()) return "none";
  if (g.k == 0) return "kernel";
  std::lock_guard<std::mutex> lock(plans_->mu);
  return plans_->plan_for(g).lt ? "cublasLt" : "cublas";
}

void CudaOps::gemm(const GemmArgs& g) {
  check_args(g);
  if (g.empty()) return;
  if (g.k == 0) {
    scale_c(g);
    return;
  }
  std::lock_guard<std::mutex> lock(plans_->mu);
  plans_->run(g, plans_->plan_for(g), stream_);
}

}  // namespace amp::cuda
