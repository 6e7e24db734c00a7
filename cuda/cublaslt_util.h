// Small helpers of the two cuBLASLt users (the linear layers' LtGemm, gemm.cpp, and the general
// strided batched GEMM, ops_general.cpp): dtype mapping, pointer alignment, the heuristic's
// preferences, attribute setters.
#pragma once

#include <cublasLt.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "cudart/cuda_check.h"

namespace amp::cuda {

inline cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    default: break;
  }
  throw Error(ErrorKind::Internal, strcat("gemm: unsupported dtype ", dtype_name(t)));
}

// Largest power of two (up to 256) that divides the address: what cuBLASLt may assume.
inline uint32_t alignment_of(const void* p) {
  const uintptr_t x = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 1;
  while (a < 256 && x % (2 * a) == 0) a *= 2;
  return a;
}

// The heuristic's preferences of every cuBLASLt call of the project: the workspace, the operands'
// alignments, and no split-K reduction in the output type (partial sums rounded to a 16-bit C and
// added there would round more than once: the documented single rounding). Returns the first
// failing status. One function for both users, so neither can forget the reduction mask.
inline cublasStatus_t set_preferences(cublasLtMatmulPreference_t pref, uint64_t workspace_bytes, uint32_t align_a,
                                      uint32_t align_b, uint32_t align_cd) {
  cublasStatus_t st =
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                           sizeof workspace_bytes);
  const auto set = [&](cublasLtMatmulPreferenceAttributes_t attr, uint32_t v) {
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof v);
  };
  set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a);
  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b);
  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_cd);
  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_cd);
  return st;
}

template <typename T>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  AMP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof v));
}

template <typename T>
void set_layout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, const T& v) {
  AMP_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, attr, &v, sizeof v));
}

}  // namespace amp::cuda
