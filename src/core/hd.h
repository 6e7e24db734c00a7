// AMP_HD marks functions usable from host and device code. Under nvcc it expands to
// __host__ __device__; in plain C++ builds it is empty, so src/ headers need no CUDA headers.
#pragma once

#if defined(__CUDACC__)
#define AMP_HD __host__ __device__ __forceinline__
#else
#define AMP_HD inline
#endif
