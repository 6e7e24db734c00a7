// The CUDA backend: one device, one stream; every operation of amp::Backend as a kernel or a
// cuBLASLt call enqueued on that stream. Only download(), synchronize() and grad_stats() wait
// for the device (and upload() when the host runs a whole staging ring ahead of it); the rest never
// does, so the device part of a step can be captured into a CUDA graph and replayed. Calls that
// cannot be captured (alloc, upload, download, ...) throw while a capture is open.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/device_stream.h"
#include "cudart/device_buffer.h"
#include "cuda/gemm.h"
#include "cudart/host_wait.h"
#include "cuda/kernels.h"
#include "cuda/ops_general.h"
#include "cuda/ops_transformer.h"
#include "cuda/span_table.h"
#include "cuda/staging_ring.h"

namespace amp::cuda {

// Also the owner of its stream for a device communicator (DeviceStream): NCCL orders its
// collectives after this stream, drops the captured graph before it is destroyed or aborted, and
// makes this backend's host waits check for its errors.
class CudaBackend final : public Backend, public DeviceStream {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return name_; }
  bool host_accessible() const override { return false; }
  void* stream_handle() override { return stream_->get(); }
  int device() const { return device_; }
  GeneralOps& general() { return *general_; }  // tests and benchmarks: GEMM paths and planning
  TransformerOps& transformer() { return *tops_; }  // tests: the embedding scratch

  Buffer alloc(size_t bytes) override;
  void upload(void* dst, const void* host_src, size_t bytes) override;
  void download(void* host_dst, const void* src, size_t bytes) override;
  void zero(void* dst, size_t bytes) override;
  void synchronize() override;
  // Free device memory, shared among the ranks of the node that use this device.
  size_t memory_available(int ranks_on_node) const override;

  void cast(const void* src, DType src_type, void* dst, DType dst_type, size_t n) override;
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) override;
  void linear_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx) override;
  void linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) override;
  void gemm(const GemmArgs& g) override { general_->gemm(g, stream_->get()); }
  void add(const AddArgs& a) override { general_->add(a, stream_->get()); }
  void row_sum(const RowSumArgs& r) override { general_->row_sum(r, stream_->get()); }
  void layernorm_forward(const LayerNormArgs& a) override { tops_->layernorm_forward(a, stream_->get()); }
  void layernorm_backward(const LayerNormBackwardArgs& a) override { tops_->layernorm_backward(a, stream_->get()); }
  void causal_softmax_forward(const CausalSoftmaxArgs& a) override { tops_->causal_softmax_forward(a, stream_->get()); }
  void causal_softmax_backward(const CausalSoftmaxBackwardArgs& a) override {
    tops_->causal_softmax_backward(a, stream_->get());
  }
  void embedding_forward(const EmbeddingArgs& a) override { tops_->embedding_forward(a, stream_->get()); }
  void embedding_backward(const EmbeddingBackwardArgs& a) override { tops_->embedding_backward(a, stream_->get()); }
  void reserve_embedding(int64_t max_tokens, int64_t vocab) override;
  void activation_forward(Activation a, const Tensor& z, const Tensor& y) override;
  void activation_backward(Activation a, const Tensor& z, const Tensor& dy, const Tensor& dz) override;
  void softmax_xent(const SoftmaxXentArgs& a) override;
  void mse(const Tensor& pred, const Tensor& target, const float* scale, float inv_count, const Tensor& dpred,
           float* loss_sum) override;
  void find_nonfinite(const void* grads, DType dtype, const std::vector<TensorSpan>& spans, size_t begin,
                      size_t end, int32_t* flag) override;
  void unscale_check(const void* grads, DType dtype, const std::vector<TensorSpan>& spans, const float* scale,
                     float* out32, int32_t* flags, float* norm_sq, int32_t* norm_bits = nullptr) override;
  std::vector<GradStats> grad_stats(const void* grads, DType dtype, const std::vector<TensorSpan>& spans) override;
  void optimizer_step(const OptimizerParams& p, const float* lr, float max_norm, float* master, const float* g32,
                      float* state1, float* state2, size_t n, void* lp, DType lp_dtype, const int32_t* flags,
                      const float* norm_sq, const ScalerState* scaler) override;
  void check_norm(const float* norm_sq, float max_norm, int32_t* flags) override;
  void sum_norm_partials(const int32_t* flags, int world, float* norm_sq) override;
  void update_scale(ScalerState* state, const ScalerParams& params, const int32_t* flags, int world) override;

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
  void not_capturing(const char* what) const;  // throws if a capture is open
  void gemm(const GemmCall& c);
  // An FP32 buffer of at least n elements for GEMM results that still get a bias (grown outside
  // captures only: the eager warm-up steps size it).
  float* f32_scratch(size_t n);

  int device_ = 0;
  std::string name_;
  unsigned max_blocks_ = 1;
  std::shared_ptr<Stream> stream_;  // shared with the release functions of the buffers handed out
  WaitCheck wait_check_;            // before ring_, which refers to it
  std::unique_ptr<StagingRing> ring_;
  std::unique_ptr<LtGemm> gemm_;
  std::unique_ptr<GeneralOps> general_;  // gemm/add/row_sum of the general op set
  std::unique_ptr<TransformerOps> tops_;  // LayerNorm, causal softmax, GELU (tanh), embeddings
  SpanTableCache spans_;
  DeviceBuffer<double> loss_partials_;
  DeviceBuffer<long long> hit_partials_;
  DeviceBuffer<float> gemm_scratch_;
  std::vector<DeviceBuffer<float>> retired_scratch_;  // outgrown ones: a graph may still write them
  GraphExec graph_;
  uint64_t graph_id_ = 0, launches_ = 0;
  bool capturing_ = false;
  bool warned_bias_ = false;
};

}  // namespace amp::cuda
