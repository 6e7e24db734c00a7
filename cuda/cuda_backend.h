// The CUDA backend: one device, one stream; the compute ops of cuda::CudaOps and the memory,
// mixed-precision and optimizer kernels here, every call enqueued on that stream. Only download(),
// synchronize() and grad_stats() wait for the device (and upload() when the host runs a whole
// staging ring ahead of it); the rest never does, so the device part of a step can be captured
// into a CUDA graph and replayed. Calls that cannot be captured (alloc, upload, download, ...)
// throw while a capture is open.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/device_stream.h"
#include "cuda/cuda_ops.h"
#include "cuda/kernels.h"
#include "cuda/span_table.h"
#include "cuda/staging_ring.h"
#include "cuda/vmm_allocation.h"
#include "cudart/device_buffer.h"
#include "cudart/host_wait.h"

namespace amp::cuda {

// Also the owner of its stream for a device communicator (DeviceStream): NCCL orders its
// collectives after this stream, drops the captured graph before it is destroyed or aborted, and
// makes this backend's host waits check for its errors.
class CudaBackend final : public Backend,
                          public DeviceMemory,
                          public AmpKernels,
                          public OptimizerKernels,
                          public StepCapture,
                          public DeviceStream {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return name_; }
  DeviceMemory& memory() override { return *this; }
  ComputeOps& ops() override { return *ops_; }
  AmpKernels& amp_kernels() override { return *this; }
  OptimizerKernels& optimizer() override { return *this; }
  StepCapture& capture() override { return *this; }
  CudaOps& cuda_ops() { return *ops_; }  // tests and benchmarks: GEMM paths, the embedding scratch
  void* stream_handle() override { return stream_->get(); }
  int device() const { return device_; }

  // ---- DeviceMemory
  bool host_accessible() const override { return false; }
  Buffer alloc(size_t bytes) override;
  void upload(void* dst, const void* host_src, size_t bytes) override;
  void download(void* host_dst, const void* src, size_t bytes) override;
  void zero(void* dst, size_t bytes) override;
  void synchronize() override;
  // Free device memory, shared among the ranks of the node that use this device.
  size_t memory_available(int ranks_on_node) const override;
  // Releasable memory in the CUDA virtual memory API (vmm_allocation.h) where the device has it:
  // pages of the driver's granularity, returned once the work enqueued before release() has run.
  Buffer alloc_releasable(size_t bytes) override;
  size_t release_granularity() const override { return vmm_page_; }
  void release(void* p, size_t bytes) override;
  void commit(void* p, size_t bytes) override;
  size_t resident_bytes(const void* p, size_t bytes) const override;

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

  // ---- StepCapture
  bool can_capture() const override { return true; }
  bool begin_capture() override;
  void end_capture() override;
  void replay() override;
  // Drops the captured graph (closing a capture left open); replay() fails until the next capture.
  void release_capture() noexcept override;
  // The live graph's id (0: none; each capture gets a new one) and how often it was launched.
  uint64_t graph_id() const override { return graph_id_; }
  uint64_t graph_launches() const override { return launches_; }
  // Runs while the host waits for the stream (download, synchronize, a full staging ring): see
  // host_wait.h. Empty: plain blocking waits.
  void set_wait_check(WaitCheck check) override { wait_check_ = std::move(check); }

 private:
  Launch launch() const { return Launch{stream_->get(), max_blocks_}; }
  std::shared_ptr<VmmAllocation> releasable_at(const void* p, const char* what) const;
  void not_capturing(const char* what) const;  // throws if a capture is open

  int device_ = 0;
  std::string name_;
  unsigned max_blocks_ = 1;
  std::shared_ptr<Stream> stream_;  // shared with the release functions of the buffers handed out
  WaitCheck wait_check_;            // before ring_ and ops_, which refer to it
  std::unique_ptr<StagingRing> ring_;
  std::unique_ptr<CudaOps> ops_;
  SpanTableCache spans_;
  GraphExec graph_;
  uint64_t graph_id_ = 0, launches_ = 0;
  bool capturing_ = false;
  size_t vmm_page_ = 0;                                   // 0: no virtual memory management
  std::vector<std::weak_ptr<VmmAllocation>> releasable_;  // owned by the buffers handed out
};

}  // namespace amp::cuda
