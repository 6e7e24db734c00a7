// AMP_CUDA_CHECK / AMP_CUBLAS_CHECK: turn a failed CUDA runtime or cuBLAS(Lt) call into an amp::Error of
// kind Device whose message reads "cuda/gemm.cpp:88: cublasLtMatmul(...) failed: <reason>" (main
// adds the rank). AMP_CUDA_WARN is the destructor flavour: it logs instead of throwing.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

namespace amp::cuda {

// "cuda/gemm.cpp" from an absolute __FILE__: the last two path components.
const char* short_path(const char* file);

[[noreturn]] void throw_device_error(const char* file, int line, const char* expr, const std::string& why);
void warn_device_error(const char* file, int line, const char* expr, const std::string& why) noexcept;

std::string cuda_error_string(cudaError_t e);
std::string cublas_error_string(cublasStatus_t s);

// After a kernel launch: a bad configuration or a missing kernel image shows up here.
void check_launch(const char* file, int line, const char* kernel);

}  // namespace amp::cuda

#define AMP_CUDA_CHECK(call)                                                                       \
  do {                                                                                         \
    const cudaError_t amp_err_ = (call);                                                       \
    if (amp_err_ != cudaSuccess)                                                               \
      ::amp::cuda::throw_device_error(__FILE__, __LINE__, #call, ::amp::cuda::cuda_error_string(amp_err_)); \
  } while (0)

#define AMP_CUBLAS_CHECK(call)                                                                     \
  do {                                                                                         \
    const cublasStatus_t amp_st_ = (call);                                                     \
    if (amp_st_ != CUBLAS_STATUS_SUCCESS)                                                      \
      ::amp::cuda::throw_device_error(__FILE__, __LINE__, #call, ::amp::cuda::cublas_error_string(amp_st_)); \
  } while (0)

#define AMP_CUDA_WARN(call)                                                                    \
  do {                                                                                         \
    const cudaError_t amp_err_ = (call);                                                       \
    if (amp_err_ != cudaSuccess)                                                               \
      ::amp::cuda::warn_device_error(__FILE__, __LINE__, #call, ::amp::cuda::cuda_error_string(amp_err_)); \
  } while (0)

// Ends every kernel launcher: AMP_CHECK_LAUNCH("cast_kernel").
#define AMP_CHECK_LAUNCH(name) ::amp::cuda::check_launch(__FILE__, __LINE__, name)
