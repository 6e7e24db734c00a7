#include "backend/cpu/cpu_backend.h"

#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "core/host_memory.h"

namespace amp {

CpuBackend::CpuBackend(int threads) : threads_(threads > 0 ? threads : 1) { omp_set_num_threads(threads_); }

std::string CpuBackend::name() const { return strcat("cpu (", threads_, threads_ == 1 ? " thread)" : " threads)"); }

Buffer CpuBackend::alloc(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded >= kMappedAllocBytes) {  // the kernel's zero pages, resident once touched: no memset
    void* m = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
      throw Error(ErrorKind::Internal, strcat("out of host memory mapping ", bytes, " bytes: ", std::strerror(errno)));
    // In transparent huge pages where the kernel has them (a hint): a first touch costs one fault
    // per 2 MiB instead of 512, and a read before the first write (AdamW's moments, accumulated
    // gradients) no second fault to replace the shared zero page.
    (void)madvise(m, rounded, MADV_HUGEPAGE);
    return Buffer(m, bytes, [rounded](void* q) { munmap(q, rounded); });
  }
  void* p = std::aligned_alloc(64, rounded ? rounded : 64);
  if (!p) throw Error(ErrorKind::Internal, strcat("out of host memory allocating ", bytes, " bytes"));
  std::memset(p, 0, rounded);
  return Buffer(p, bytes, [](void* q) { std::free(q); });
}

size_t CpuBackend::memory_available(int ranks_on_node) const {
  // MemAvailable, shared by the node's ranks.
  return host_memory_available() / size_t(ranks_on_node > 0 ? ranks_on_node : 1);
}

Buffer CpuBackend::alloc_releasable(size_t bytes) {
  const size_t page = kReleasePageBytes;
  const size_t span = (bytes + page - 1) / page * page, len = span + page;  // room to align
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    throw Error(ErrorKind::Internal, strcat("out of host memory mapping ", bytes, " bytes: ", std::strerror(errno)));
  const uintptr_t at = (reinterpret_cast<uintptr_t>(m) + page - 1) / page * page;
  void* p = reinterpret_cast<void*>(at);
  (void)madvise(p, span, MADV_HUGEPAGE);  // a hint: without transparent huge pages, 4 KiB pages
  return Buffer(p, bytes, [m, len](void*) { munmap(m, len); });
}

void CpuBackend::release(void* p, size_t bytes) {
  const size_t page = release_granularity();  // the mapping's huge pages (4 KiB ones divide it)
  const PageSpan s = pages_inside(reinterpret_cast<uintptr_t>(p), bytes, page);
  if (s.first == s.last) return;
  // Private anonymous memory (the allocator's): the pages are dropped (zero when touched again), and
  // protected so that a read or write before commit() faults here as it would on a device.
  void* at = reinterpret_cast<void*>(s.first * page);
  const size_t len = (s.last - s.first) * page;
  if (madvise(at, len, MADV_DONTNEED) != 0)
    throw Error(ErrorKind::Internal, strcat("madvise(MADV_DONTNEED) of ", len, " bytes failed: ", std::strerror(errno)));
  if (mprotect(at, len, PROT_NONE) != 0)
    throw Error(ErrorKind::Internal, strcat("mprotect(PROT_NONE) of ", len, " bytes failed: ", std::strerror(errno)));
}

void CpuBackend::commit(void* p, size_t bytes) {
  const size_t page = release_granularity();
  const PageSpan s = pages_overlapping(reinterpret_cast<uintptr_t>(p), bytes, page);
  if (s.first == s.last) return;
  const size_t len = (s.last - s.first) * page;
  if (mprotect(reinterpret_cast<void*>(s.first * page), len, PROT_READ | PROT_WRITE) != 0)
    throw Error(ErrorKind::Internal, strcat("mprotect(PROT_READ | PROT_WRITE) of ", len, " bytes failed: ", std::strerror(errno)));
}

size_t CpuBackend::resident_bytes(const void* p, size_t bytes) const {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));  // mincore's unit
  const PageSpan s = pages_overlapping(reinterpret_cast<uintptr_t>(p), bytes, page);
  std::vector<unsigned char> in(s.last - s.first);
  if (in.empty() || mincore(reinterpret_cast<void*>(s.first * page), in.size() * page, in.data()) != 0) return 0;
  size_t n = 0;
  for (unsigned char c : in) n += c & 1;
  return n * page;
}

void CpuBackend::upload(void* dst, const void* host_src, size_t bytes) { std::memcpy(dst, host_src, bytes); }
void CpuBackend::download(void* host_dst, const void* src, size_t bytes) { std::memcpy(host_dst, src, bytes); }
void CpuBackend::zero(void* dst, size_t bytes) { std::memset(dst, 0, bytes); }

void CpuBackend::find_nonfinite(const void* grads, DType dtype, const std::vector<TensorSpan>& spans, size_t begin,
                                size_t end, int32_t* flag) {
  const int32_t f = cpu::find_nonfinite(grads, dtype, spans, begin, end);
  if (f && (*flag == 0 || f < *flag)) *flag = f;
}

void CpuBackend::unscale_check(const void* grads, DType dtype, const std::vector<TensorSpan>& spans,
                               const float* scale, float* out32, int32_t* flags, float* norm_sq, int32_t* norm_bits) {
  double n2 = 0.0;
  const bool want = norm_sq || norm_bits;
  const int32_t f = cpu::unscale_check(grads, dtype, spans, *scale, out32, want ? &n2 : nullptr);
  flags[OverflowFlags::kReduced] = f;
  if (f) flags[OverflowFlags::kAny] = 1;
  if (norm_bits) store_norm_partial(norm_bits, n2);
  else if (norm_sq) *norm_sq = float(n2);
}

void CpuBackend::unscale(const void* grads, DType dtype, size_t n, const float* scale, float* out32) {
  cpu::unscale(grads, dtype, n, *scale, out32);
}

std::vector<GradStats> CpuBackend::grad_stats(const void* grads, DType dtype, const std::vector<TensorSpan>& spans) {
  return cpu::grad_stats(grads, dtype, spans);
}

void CpuBackend::optimizer_step(const OptimizerStepArgs& a) {
  if (a.verdict.flags[OverflowFlags::kAny]) return;  // the coordinated skip: nothing changes
  const float grad_mul = a.max_norm > 0.0f ? clip_coefficient(a.max_norm, *a.verdict.norm_sq) : 1.0f;
  const StepScalars s = make_step_scalars(a.params, *a.lr, grad_mul, a.verdict.scaler->optimizer_steps + 1);
  cpu::optimizer_step(a.params, s, a.master, a.g32, a.state1, a.state2, a.n, a.lp, a.lp_dtype);
}

void CpuBackend::check_norm(const float* norm_sq, float max_norm, int32_t* flags) {
  flag_norm_overflow(flags, *norm_sq, max_norm);
}

void CpuBackend::sum_norm_partials(const int32_t* flags, int world, float* norm_sq) {
  *norm_sq = amp::sum_norm_partials(flags, world);
}

void CpuBackend::update_scale(ScalerState* state, const ScalerParams& params, const int32_t* flags, int world) {
  scaler_record_flags(*state, flags, world);
  scaler_update(*state, params, flags[OverflowFlags::kAny] != 0);
}

void CpuBackend::fp8_update(float* scales, const float* fmax, float* history, Fp8Meta* meta, const int32_t* amax_words,
                            int n, const Fp8Params& p, const int32_t* flags, float* inv_scales,
                            int32_t* skipped_amax) {
  amp::fp8_update(scales, fmax, history, meta, amax_words, n, p, flags[OverflowFlags::kAny] != 0, inv_scales,
                  skipped_amax);
}

}  // namespace amp
