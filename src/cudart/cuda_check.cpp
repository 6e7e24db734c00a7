#include "cudart/cuda_check.h"

#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace amp::cuda {

const char* short_path(const char* file) {
  const char* last = std::strrchr(file, '/');
  if (!last) return file;
  for (const char* p = last - 1; p >= file; --p)
    if (*p == '/') return p + 1;
  return file;
}

void throw_device_error(const char* file, int line, const char* expr, const std::string& why) {
  throw Error(ErrorKind::Device, strcat(short_path(file), ":", line, ": ", expr, " failed: ", why));
}

void warn_device_error(const char* file, int line, const char* expr, const std::string& why) noexcept {
  std::fprintf(stderr, "warning: %s:%d: %s failed: %s\n", short_path(file), line, expr, why.c_str());
}

std::string cuda_error_string(cudaError_t e) {
  return strcat(cudaGetErrorString(e), " (", cudaGetErrorName(e), ", ", int(e), ")");
}

std::string cublas_error_string(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return strcat("cublasStatus_t ", int(s));
  }
}

void check_launch(const char* file, int line, const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw_device_error(file, line, strcat(kernel, "<<<...>>>").c_str(), cuda_error_string(e));
}

}  // namespace amp::cuda
