// The CPU backend: host memory, the compute ops of cpu::CpuOps (oneDNN GEMMs, OpenMP loops), and
// the mixed-precision and optimizer kernels (kernels.h); no step capture (steps run eagerly).
#pragma once

#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "optim/state_bytes.h"  // kReleasePageBytes

namespace amp {

class CpuBackend final : public Backend,
                         public DeviceMemory,
                         public AmpKernels,
                         public OptimizerKernels,
                         public StepCapture {
 public:
  explicit CpuBackend(int threads);
  std::string name() const override;
  DeviceMemory& memory() override { return *this; }
  ComputeOps& ops() override { return ops_; }
  AmpKernels& amp_kernels() override { return *this; }
  OptimizerKernels& optimizer() override { return *this; }
  StepCapture& capture() override { return *this; }
  cpu::CpuOps& cpu_ops() { return ops_; }  // tests and benchmarks: how a GEMM runs
  int threads() const { return threads_; }

  // ---- DeviceMemory: host memory
  bool host_accessible() const override { return true; }
  // Zero-filled, 64-byte aligned. From kMappedAllocBytes up, a mapping of its own: the kernel's
  // zero pages, made resident as they are first touched, so a large buffer costs no pass over it
  // at allocation (a model's activations for its largest batch, the LM head's logits) and the part
  // a run never touches (a shorter last batch, evaluation-sized buffers) no resident memory. In
  // transparent huge pages where the kernel has them (cpu_backend.cpp).
  static constexpr size_t kMappedAllocBytes = size_t(1) << 20;
  Buffer alloc(size_t bytes) override;
  void upload(void* dst, const void* host_src, size_t bytes) override;
  void download(void* host_dst, const void* src, size_t bytes) override;
  void zero(void* dst, size_t bytes) override;
  void synchronize() override {}
  size_t memory_available(int ranks_on_node) const override;
  // Releasable: a mapping of its own in transparent huge pages (kReleasePageBytes; zero-filled by
  // the kernel as it is touched): returning and touching again a 2 MiB page costs about as much as
  // 8 KiB of 4 KiB pages (a page fault each) on the machines measured.
  Buffer alloc_releasable(size_t bytes) override;
  size_t release_granularity() const override { return kReleasePageBytes; }
  // release: madvise(MADV_DONTNEED) and mprotect(PROT_NONE); commit: readable and writable again,
  // the released pages zero-filled by the kernel as they are touched.
  void release(void* p, size_t bytes) override;
  void commit(void* p, size_t bytes) override;
  size_t resident_bytes(const void* p, size_t bytes) const override;  // mincore

  // ---- AmpKernels, OptimizerKernels
  void find_nonfinite(const void* grads, DType dtype, const std::vector<TensorSpan>& spans, size_t begin,
                      size_t end, int32_t* flag) override;
  void unscale_check(const void* grads, DType dtype, const std::vector<TensorSpan>& spans, const float* scale,
                     float* out32, int32_t* flags, float* norm_sq, int32_t* norm_bits = nullptr) override;
  void unscale(const void* grads, DType dtype, size_t n, const float* scale, float* out32) override;
  std::vector<GradStats> grad_stats(const void* grads, DType dtype, const std::vector<TensorSpan>& spans) override;
  void check_norm(const float* norm_sq, float max_norm, int32_t* flags) override;
  void sum_norm_partials(const int32_t* flags, int world, float* norm_sq) override;
  void update_scale(ScalerState* state, const ScalerParams& params, const int32_t* flags, int world) override;
  void fp8_update(float* scales, const float* fmax, float* history, Fp8Meta* meta, const int32_t* amax_words, int n,
                  const Fp8Params& p, const int32_t* flags, float* inv_scales,
                  int32_t* skipped_amax) override;
  void optimizer_step(const OptimizerStepArgs& a) override;
  // 64Ki elements (256 KiB of FP32) per thread: a pass's unscaled gradients stay in the core's L2
  // for the update. The char GPT in BF16, 1 thread: the optimizer phase 20 -> 15 ms against whole
  // 25 MiB chunks, written out and read back (docs/benchmarks.md).
  size_t pass_elements() const override { return kPassElementsPerThread * size_t(threads_); }

 private:
  static constexpr size_t kPassElementsPerThread = size_t(1) << 16;
  int threads_;
  cpu::CpuOps ops_;
};

}  // namespace amp
