// Bulk float <-> f16/bf16 conversions: the scalar reference kernels, the run-time choice among
// them and the SIMD kernels (convert_f16c.cpp, convert_avx512.cpp), and the dtype-generic
// convert() / convert_parallel() / 16-bit sums built on them.
// Every vector path is checked lane for lane against core/half.h by tests/unit/test_convert.cpp.
#include "core/convert.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/half.h"

#include "core/convert_simd.h"

namespace amp {
namespace {

using namespace convert_detail;

// ---- scalar: the reference itself -----------------------------------------------------------

void f32_to_f16_scalar(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = float_to_half_bits(src[i]);
}
void f16_to_f32_scalar(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = half_bits_to_float(src[i]);
}
void f32_to_bf16_scalar(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = float_to_bf16_bits(src[i]);
}
void bf16_to_f32_scalar(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_float(src[i]);
}
void f16_widen_add_scalar(const uint16_t* src, float* acc, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] += half_bits_to_float(src[i]);
}
void bf16_widen_add_scalar(const uint16_t* src, float* acc, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] += bf16_bits_to_float(src[i]);
}


std::vector<ConvertKernels> detect_kernels() {
  std::vector<ConvertKernels> ks;
  ks.push_back({"scalar", f32_to_f16_scalar, f16_to_f32_scalar, f32_to_bf16_scalar, bf16_to_f32_scalar,
                f16_widen_add_scalar, bf16_widen_add_scalar});
#if AMP_CONVERT_X86
  // __builtin_cpu_supports also checks that the OS saves the AVX / AVX-512 register state.
  __builtin_cpu_init();  // harmless if done already; needed when called from a static initializer
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c"))
    ks.push_back({"f16c", f32_to_f16_f16c, f16_to_f32_f16c, f32_to_bf16_f16c, bf16_to_f32_f16c, f16_widen_add_f16c,
                  bf16_widen_add_f16c});
  if (avx512)
    ks.push_back({"avx512", f32_to_f16_avx512, f16_to_f32_avx512, f32_to_bf16_avx512, bf16_to_f32_avx512,
                  f16_widen_add_avx512, bf16_widen_add_avx512});
  if (avx512 && __builtin_cpu_supports("avx512bf16"))
    ks.push_back({"avx512bf16", f32_to_f16_avx512, f16_to_f32_avx512, f32_to_bf16_avx512bf16, bf16_to_f32_avx512,
                  f16_widen_add_avx512, bf16_widen_add_avx512});
#endif
  return ks;
}

bool is_float_dtype(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

void check_dtypes(DType src_type, DType dst_type) {
  if (!is_float_dtype(src_type) || !is_float_dtype(dst_type))
    throw Error(ErrorKind::Internal, strcat("convert: unsupported dtype pair ",
                                            dtype_name(src_type), " -> ", dtype_name(dst_type),
                                            " (only f32, f16, bf16)"));
}

// Below this many elements the fork/join of an OpenMP region costs more than it saves.
constexpr size_t kParallelMinElements = size_t{1} << 16;
// Chunk boundaries are multiples of this, so every thread but the last runs whole vectors and
// no two threads write the same cache line (64 elements >= 64 bytes for every dtype).
constexpr size_t kParallelGrain = 64;

}  // namespace

const std::vector<ConvertKernels>& available_convert_kernels() {
  static const std::vector<ConvertKernels> kernels = detect_kernels();
  return kernels;
}

const ConvertKernels& active_convert_kernels() {
  static const ConvertKernels& active = available_convert_kernels().back();
  return active;
}

void f32_to_f16(const float* src, uint16_t* dst, size_t n) {
  active_convert_kernels().f32_to_f16(src, dst, n);
}
void f16_to_f32(const uint16_t* src, float* dst, size_t n) {
  active_convert_kernels().f16_to_f32(src, dst, n);
}
void f32_to_bf16(const float* src, uint16_t* dst, size_t n) {
  active_convert_kernels().f32_to_bf16(src, dst, n);
}
void bf16_to_f32(const uint16_t* src, float* dst, size_t n) {
  active_convert_kernels().bf16_to_f32(src, dst, n);
}

void convert(const void* src, DType src_type, void* dst, DType dst_type, size_t n) {
  check_dtypes(src_type, dst_type);
  if (n == 0) return;
  if (src_type == dst_type) {
    if (src != dst) std::memcpy(dst, src, n * dtype_size(src_type));
    return;
  }
  const ConvertKernels& k = active_convert_kernels();
  const auto to_f32 = src_type == DType::F16 ? k.f16_to_f32 : k.bf16_to_f32;
  const auto from_f32 = dst_type == DType::F16 ? k.f32_to_f16 : k.f32_to_bf16;
  if (src_type == DType::F32) {
    from_f32(static_cast<const float*>(src), static_cast<uint16_t*>(dst), n);
  } else if (dst_type == DType::F32) {
    to_f32(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n);
  } else {
    // 16 -> 16 through float in chunks that stay in L1 (4 KiB of float).
    const auto* s = static_cast<const uint16_t*>(src);
    auto* d = static_cast<uint16_t*>(dst);
    float buf[1024];
    for (size_t i = 0; i < n; i += 1024) {
      const size_t m = std::min<size_t>(1024, n - i);
      to_f32(s + i, buf, m);
      from_f32(buf, d + i, m);
    }
  }
}

void widen_add(const void* src, DType src_type, float* acc, size_t n) {
  check_dtypes(src_type, DType::F32);
  if (src_type == DType::F32) {
    const float* x = static_cast<const float*>(src);
    for (size_t i = 0; i < n; ++i) acc[i] += x[i];
    return;
  }
  const ConvertKernels& k = active_convert_kernels();
  (src_type == DType::F16 ? k.f16_widen_add : k.bf16_widen_add)(static_cast<const uint16_t*>(src), acc, n);
}

void convert_parallel(const void* src, DType src_type, void* dst, DType dst_type, size_t n) {
  check_dtypes(src_type, dst_type);  // throw here: an exception must not leave an omp region
  if (n < kParallelMinElements || omp_get_max_threads() <= 1 || omp_in_parallel()) {
    convert(src, src_type, dst, dst_type, n);
    return;
  }
  const size_t src_size = dtype_size(src_type);
  const size_t dst_size = dtype_size(dst_type);
  const size_t grains = (n + kParallelGrain - 1) / kParallelGrain;
#pragma omp parallel
  {
    const size_t t = static_cast<size_t>(omp_get_thread_num());
    const size_t nt = static_cast<size_t>(omp_get_num_threads());
    const size_t begin = std::min(n, grains * t / nt * kParallelGrain);
    const size_t end = std::min(n, grains * (t + 1) / nt * kParallelGrain);
    if (end > begin)
      convert(static_cast<const char*>(src) + begin * src_size, src_type,
              static_cast<char*>(dst) + begin * dst_size, dst_type, end - begin);
  }
}

namespace {
// Portable path: widen chunks with the active converters, add, round back (out may be a or b:
// each chunk is read whole before it is written).
template <bool kBf16>
void add16_portable(const uint16_t* a, const uint16_t* b, uint16_t* out, size_t n) {
  constexpr size_t kChunk = 256;
  alignas(64) float fa[kChunk], fb[kChunk];
  for (size_t off = 0; off < n; off += kChunk) {
    const size_t len = std::min(kChunk, n - off);
    (kBf16 ? bf16_to_f32 : f16_to_f32)(a + off, fa, len);
    (kBf16 ? bf16_to_f32 : f16_to_f32)(b + off, fb, len);
    for (size_t i = 0; i < len; ++i) fb[i] = fa[i] + fb[i];
    (kBf16 ? f32_to_bf16 : f32_to_f16)(fb, out + off, len);
  }
}

using AddFn = void (*)(const uint16_t*, const uint16_t*, uint16_t*, size_t);
AddFn pick_add(bool bf16) {
#if AMP_CONVERT_X86
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) {
    if (!bf16) return convert_detail::f16_add_avx512;
    // vcvtneps2bf16 (with its subnormal fix-up) rounds faster than the integer sequence.
    return __builtin_cpu_supports("avx512bf16") ? convert_detail::bf16_add_avx512bf16 : convert_detail::bf16_add_avx512;
  }
#endif
  return bf16 ? add16_portable<true> : add16_portable<false>;
}
}  // namespace

void f16_sum(const uint16_t* a, const uint16_t* b, uint16_t* out, size_t n) {
  static const AddFn fn = pick_add(false);
  fn(a, b, out, n);
}

void bf16_sum(const uint16_t* a, const uint16_t* b, uint16_t* out, size_t n) {
  static const AddFn fn = pick_add(true);
  fn(a, b, out, n);
}

}  // namespace amp
