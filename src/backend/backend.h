// The backend seam: memory and the operations a data-parallel MLP step needs. The CPU backend runs
// them on the host (oneDNN GEMMs, OpenMP loops); the CUDA backend runs the same operations as
// kernels and cuBLAS calls on one stream. Pointers marked "backend memory" live where the backend
// computes (device memory on CUDA): the step's scalars (loss scale, overflow flags, norms) stay
// there, so a device backend never waits for the host inside a step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "amp/loss_scaler.h"
#include "backend/tensor.h"
#include "optim/optimizer.h"

namespace amp {

enum class Activation : int32_t { Relu = 0, Gelu = 1 };

// One parameter tensor inside the flat parameter/gradient buffers (offsets in elements).
struct TensorSpan {
  size_t offset = 0;
  size_t count = 0;
};

// Per-tensor statistics of 16-bit gradients (precision telemetry).
struct GradStats {
  double zero_frac = 0, subnormal_frac = 0;
  float max_abs = 0;  // of the stored (still scaled) values
};

// Overflow flags, in backend memory, int32 each. Reduced across ranks with MAX, so each slot
// carries who saw what: slot kAny is 1 when any rank found a non-finite value; slot kReduced holds
// 1 + the first tensor with a non-finite value after the all-reduce; slot kRank0 + r holds 1 + the
// first tensor with a non-finite value on rank r before the all-reduce.
// kReduced holds kNormOverflow when every gradient was finite but their norm was not (FP32 gradients
// near the top of the range) while clipping needs it: the optimizer skips such a step too.
struct OverflowFlags {
  static constexpr int kAny = 0, kReduced = 1, kRank0 = 2;
  static constexpr int32_t kNormOverflow = -1;
  static size_t count(int world) { return size_t(kRank0 + world); }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual bool host_accessible() const = 0;  // true: backend memory is ordinary host memory
  virtual void* native_stream() { return nullptr; }  // cudaStream_t of a CUDA backend

  // ---- memory (allocations are zero-filled) -----------------------------------------------
  virtual Buffer alloc(size_t bytes) = 0;
  virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;    // ordered on the stream
  virtual void download(void* host_dst, const void* src, size_t bytes) = 0;  // waits for the stream
  virtual void zero(void* dst, size_t bytes) = 0;
  virtual void synchronize() = 0;
  // Bytes this rank may still allocate (host memory available / ranks of this node, or the
  // device's free memory); 0 when unknown. Checked before a model is built.
  virtual size_t memory_available(int ranks_on_node) const = 0;

  // ---- elementwise ---------------------------------------------------------------------------
  // Converts between f32/f16/bf16, bit-identical to the scalar conversions of core/half.h.
  virtual void cast(const void* src, DType src_type, void* dst, DType dst_type, size_t n) = 0;

  // ---- linear layers: 16-bit (or f32) operands, FP32 accumulation, output in y's dtype ------
  // y[B,out] = x[B,in] * w[out,in]^T + b[out]; b has w's dtype, added before the one rounding.
  virtual void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) = 0;
  // dx[B,in] = dy[B,out] * w[out,in]
  virtual void linear_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx) = 0;
  // dw[out,in] = dy^T * x, db[out] = sum over rows of dy (FP32 sums, one rounding each)
  virtual void linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw,
                                      const Tensor& db) = 0;

  // y = act(z); dz = dy * act'(z). Math in FP32, results rounded to the tensors' dtype.
  virtual void activation_forward(Activation a, const Tensor& z, const Tensor& y) = 0;
  virtual void activation_backward(Activation a, const Tensor& z, const Tensor& dy, const Tensor& dz) = 0;

  // ---- losses (FP32 math from low-precision predictions) -------------------------------------
  // Softmax cross-entropy. Adds this batch's summed loss to *loss_sum and its correct count to
  // *correct (backend memory). When dlogits.data is non-null it receives
  // (softmax - onehot) * (*scale) * inv_count, rounded to its dtype: the loss-scaled gradient of the
  // mean loss over inv_count^-1 samples. labels are int32 in backend memory.
  virtual void softmax_xent(const Tensor& logits, const int32_t* labels, const float* scale,
                            float inv_count, const Tensor& dlogits, float* loss_sum, int32_t* correct) = 0;
  // Squared error summed over elements into *loss_sum; dpred = 2 (pred - target) * scale * inv_count.
  virtual void mse(const Tensor& pred, const Tensor& target, const float* scale, float inv_count,
                   const Tensor& dpred, float* loss_sum) = 0;

  // ---- mixed-precision bookkeeping ------------------------------------------------------------
  // Writes 1 + the index (into spans) of the first tensor holding a non-finite value within
  // elements [begin, end) of grads into *flag if *flag is 0 or larger (keeps the smallest).
  virtual void find_nonfinite(const void* grads, DType dtype, const std::vector<TensorSpan>& spans,
                              size_t begin, size_t end, int32_t* flag) = 0;
  // The fused pass: out32 = float(grads) * (1 / *scale) (the reciprocal taken in double, as
  // PyTorch), flags[kReduced] = 1 + first tensor with a non-finite value (0 if none),
  // flags[kAny] |= that, and *norm_sq = sum of squares of out32 when norm_sq is non-null.
  virtual void unscale_check(const void* grads, DType dtype, const std::vector<TensorSpan>& spans,
                             const float* scale, float* out32, int32_t* flags, float* norm_sq) = 0;
  // Per-tensor zero / subnormal fractions and largest magnitude (telemetry; host results).
  virtual std::vector<GradStats> grad_stats(const void* grads, DType dtype,
                                            const std::vector<TensorSpan>& spans) = 0;

  // One optimizer step over n master weights, unless flags[kAny] is set (then nothing changes).
  // With max_norm > 0 and a non-finite *norm_sq the step is skipped as well and marked as one:
  // flags[kAny] = 1, flags[kReduced] = kNormOverflow (clipping by an infinite norm would zero it).
  // lr is read from backend memory, so a captured step (CUDA graph) takes each step's value.
  // g32 are unscaled FP32 gradients; state1/state2: SGD momentum / AdamW m and v. The clip
  // coefficient is min(1, max_norm / (sqrt(*norm_sq) + 1e-6)) when max_norm > 0. t is taken from
  // scaler->optimizer_steps + 1. When lp is non-null the new weights are also written to it in
  // lp_dtype (the working copy for the next step).
  virtual void optimizer_step(const OptimizerParams& p, const float* lr, float max_norm, float* master,
                              const float* g32, float* state1, float* state2, size_t n, void* lp,
                              DType lp_dtype, int32_t* flags, const float* norm_sq,
                              const ScalerState* scaler) = 0;
  // scaler_record_flags(*state, flags, world), then scaler_update(*state, params, flags[kAny] != 0),
  // in backend memory.
  virtual void update_scale(ScalerState* state, const ScalerParams& params, const int32_t* flags, int world) = 0;

  // ---- step capture (CUDA graphs) -------------------------------------------------------------
  // A backend that can record the device part of a step and replay it returns true from
  // begin_capture(); the calls up to end_capture() are recorded, not run; replay() runs them.
  // Capturing fails on any call that would synchronize with the host.
  virtual bool begin_capture() { return false; }
  virtual void end_capture() {}
  virtual void replay() {}
};

// Makes the backend for run.device ("auto", "cpu", "cuda"); threads is the CPU thread count.
// A build without CUDA asked for "cuda" throws a clear error.
std::unique_ptr<Backend> make_backend(const std::string& device, int local_rank, int threads);

// True when this build has the CUDA backend and a device is visible.
bool cuda_available();

// "CUDA: on (arch 90), NCCL: on" etc., for --version and the logs.
std::string build_info();

}  // namespace amp
