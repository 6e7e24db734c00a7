// The owner of mixed precision in a training step: the loss-scaler state (in backend memory, so a
// device step never waits for the host), the overflow-flag buffer and its layout
// (overflow_flags.h), and the verbs of the step protocol (docs/design.md), in the order the step
// calls them:
//
//   begin_step()           clears the flags
//   scale()                the scale that seeds backward (loss x S)
//   check_bucket(...)      pre-reduction check of a gradient bucket: this rank's flag slot
//   unscale_and_check(...) the fused pass: FP32 gradients = 16-bit / S, non-finite check, norm²
//                          (sharded: of this rank's shard, its partial norm² into its norm slot)
//   agree(comm)            one MAX all-reduce of the flags: every rank sees every rank's verdict
//   check_norm(max_norm)   (sharded: the global norm² = the partials summed in rank order) a
//                          non-finite norm with clipping on is a skip too
//   verdict()              what the optimizer reads (flags, norm², scaler state); it steps
//                          unless flags[kAny]
//   update()               attribution of a skip, then the scale moves (scaler_update); with
//                          FP8, the amaxes join their histories and the FP8 scales move too
//
// The order is enforced on the host (no device cost, capturable): a verb called out of turn (a
// second unscale, an update before the norm check, a step begun before the last one's update)
// throws an internal error naming the verb and the phase, as PyTorch's GradScaler refuses a
// second unscale_.
//
// The backends provide the kernels (AmpKernels); the decisions are the shared host/device code of
// loss_scaler.h and overflow_flags.h. Host-side reading, checkpoint state and the skip report
// are here too, so following the scale or the flag through a step takes this class, its kernels
// and the trainer's call sites.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "amp/fp8_state.h"
#include "amp/loss_scaler.h"
#include "amp/overflow_flags.h"
#include "backend/amp_kernels.h"
#include "backend/memory.h"
#include "comm/communicator.h"

namespace amp {

// What lives in backend memory beside the flags: the scaler and the step's squared norm.
struct AmpScalars {
  ScalerState scaler;
  float norm_sq = 0;  // of the last step's unscaled gradients (the global norm after the all-reduce)
  int32_t pad_ = 0;
};

class MixedPrecision {
 public:
  // names: the parameter tensors (for reports); spans: where they lie in the flat gradients.
  MixedPrecision(DeviceMemory& mem, AmpKernels& kernels, const ScalerParams& params, DType grad_dtype,
                 std::vector<TensorSpan> spans, std::vector<std::string> names, int rank, int world);

  // Sharded optimizer state (distributed.zero: 1): unscale_and_check then reads this rank's shard
  // of the reduced gradients, where shard_spans[t] is tensor t's range (empty when the shard holds
  // none of it). check_bucket and grad_stats keep the flat layout of the full local gradients.
  void shard(std::vector<TensorSpan> shard_spans);
  bool sharded() const { return sharded_; }
  // precision.compute fp8, before the first step: the flag buffer gains one amax word per FP8
  // tensor (reduced with the flags by agree()) and the FP8 state is created.
  void enable_fp8(const Fp8Params& params, std::vector<Fp8Tensor> tensors);
  Fp8State* fp8() { return fp8_.get(); }
  const Fp8State* fp8() const { return fp8_.get(); }
  // Where the model's FP8 casts read scales and record amaxes (enable_fp8 first).
  Fp8Binding fp8_binding();

  // ---- the step's verbs (enqueued on the backend; capturable into a CUDA graph) --------------------
  void begin_step();
  const float* scale() const { return &dev_->scaler.scale; }
  void check_bucket(const void* grads, size_t begin, size_t end);
  // The fused pass over the reduced gradients: flags and norm², the unscaled values not kept.
  void unscale_and_check(const void* grads);
  // After check_norm: out32 = the unscaled values of grads[0, n) (those the fused pass computed),
  // for the optimizer, chunk by chunk.
  void unscale(const void* grads, size_t n, float* out32) const;
  void agree(Communicator* comm);  // nullptr or one rank: nothing to agree on
  void check_norm(float max_norm);
  AmpVerdict verdict() const;  // after check_norm: flags, norm², scaler state (backend memory)
  void update();

  // ---- host side -----------------------------------------------------------------------------
  AmpScalars read() const;                      // downloads (waits for the device)
  std::vector<int32_t> read_flags() const;      // the reduced flags of the last step
  void load(const ScalerState& s);              // a resumed state
  ScalerState initial_state() const { return scaler_init(params_); }
  const ScalerParams& params() const { return params_; }
  const std::vector<std::string>& tensor_names() const { return names_; }
  // Where the last skipped step's non-finite values were ("fc1.weight on rank 1", ...).
  std::string overflow_where(const ScalerState& s) const;
  // The line reporting skips between two reads ("" when none), and the divergence check: too many
  // consecutive overflows at the minimum scale throw an agreed Divergence error.
  std::string skip_report(const ScalerState& before, const ScalerState& now) const;
  void check_divergence(const ScalerState& now, int64_t divergence_steps) const;
  // Per-tensor underflow statistics of the still-scaled 16-bit gradients (telemetry).
  std::vector<GradStats> grad_stats(const void* grads) const;

 private:
  DeviceMemory& mem_;
  AmpKernels& k_;
  ScalerParams params_;
  DType grad_dtype_;
  std::vector<TensorSpan> spans_, shard_spans_;
  bool sharded_ = false;
  std::vector<std::string> names_;
  int rank_, world_;
  Buffer scalars_, flags_;
  AmpScalars* dev_ = nullptr;
  int32_t* flags_dev_ = nullptr;
  size_t flag_words_ = 0;           // OverflowFlags::count(world) + one amax word per FP8 tensor
  std::unique_ptr<Fp8State> fp8_;  // precision.compute fp8

  // Where the step stands in the protocol (host side).
  enum class Phase { Idle, Begun, Unscaled, Agreed, Checked };
  Phase phase_ = Phase::Idle;
  void expect(const char* verb, std::initializer_list<Phase> allowed, Phase next);
  void expect(const char* verb, std::initializer_list<Phase> allowed) const;
};

}  // namespace amp
