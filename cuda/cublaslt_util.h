// Small helpers of the two cuBLASLt users (the linear layers' LtGemm, gemm.cpp, and the general
// strided batched GEMM, ops_general.cpp): dtype mapping, pointer alignment, attribute setters.
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

template <typename T>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  AMP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof v));
}

template <typename T>
void set_layout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, const T& v) {
  AMP_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, attr, &v, sizeof v));
}

}  // namespace amp::cuda
