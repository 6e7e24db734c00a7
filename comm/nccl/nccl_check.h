// AMP_NCCL_CHECK: a failed NCCL call becomes an amp::Error of kind Device naming file:line, the call
// and NCCL's reason (with its last-error detail when it has one).
#pragma once

#include <nccl.h>

#include <string>

#include "core/error.h"
#include "cudart/cuda_check.h"

namespace amp::nccl {

inline std::string nccl_error_string(ncclResult_t r) {
  std::string s = ncclGetErrorString(r);
  const char* last = ncclGetLastError(nullptr);
  if (last && *last) s += strcat(" (", last, ")");
  return s;
}

}  // namespace amp::nccl

#define AMP_NCCL_CHECK(call)                                                                       \
  do {                                                                                         \
    const ncclResult_t amp_nr_ = (call);                                                       \
    if (amp_nr_ != ncclSuccess)                                                                \
      ::amp::cuda::throw_device_error(__FILE__, __LINE__, #call, ::amp::nccl::nccl_error_string(amp_nr_)); \
  } while (0)
