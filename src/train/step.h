// One data-parallel, mixed-precision training step (the step protocol of docs/design.md, read top
// to bottom in TrainStep::device_step): it owns the training state in backend memory (FP32
// masters, the 16-bit working copy, gradients, optimizer moments, the step's loss sums and lr), the
// mixed-precision owner, the gradient reducer, and the CUDA graph the step is captured into after
// warm-up (released when the step goes, before any communicator that the graph's collectives use).
// With distributed.zero: 1 the FP32 masters and the optimizer moments are sharded over the ranks
// (comm/shard_layout.h): gradients are reduce-scattered, each rank unscales, checks and updates its
// shard, and the updated working weights are all-gathered; host copies stream to rank 0 bucket by
// bucket (read). With
// distributed.zero: 2 the same, and the 16-bit gradient buffer's memory is returned to the backend
// bucket by bucket once reduced (the arithmetic, and so every bit, is stage 1's).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "amp/mixed_precision.h"
#include "backend/backend.h"
#include "comm/grad_reducer.h"
#include "comm/shard_layout.h"
#include "config/config.h"
#include "data/dataset.h"
#include "model/model.h"
#include "optim/state_bytes.h"

namespace amp {

// Steps a process runs eagerly before capturing the step into a CUDA graph (first-use allocations
// and library set-up stay outside the graph).
constexpr int64_t kWarmupStepsBeforeCapture = 2;

// The step's own scalars in backend memory (the scaler's live in MixedPrecision).
struct StepSums {
  float loss_sum = 0;   // summed per-sample losses since the last log (this rank)
  int32_t correct = 0;  // classification hits since the last log (this rank)
  float lr = 0;         // this step's learning rate (uploaded with the batch)
  int32_t pad_ = 0;
};

class TrainStep {
 public:
  // batch: samples per rank per micro-batch; accum: micro-batches per step, their gradients summed
  // in FP32 and folded into the 16-bit gradients as backward completes each tensor of the last one,
  // so one all-reduce carries the step; rank/world: this rank's place among the data-parallel ranks.
  TrainStep(const Config& cfg, Backend& be, Model& model, DType compute, size_t batch, size_t accum, int rank,
            int world);
  ~TrainStep();  // drops the captured graph first
  TrainStep(const TrainStep&) = delete;
  TrainStep& operator=(const TrainStep&) = delete;

  // The communicators: world_comm is the host one (step marks, the watchdog, and gradients when
  // device_comm is null); device_comm, when given (NCCL on the CUDA backend), carries gradients and
  // flags and is owned here, so that it goes after the captured graph that holds its collectives
  // and before the buffers those collectives use. overlap reduces buckets during backward.
  void connect(Communicator& world_comm, std::unique_ptr<Communicator> device_comm, bool overlap);
  // Called with (step, tensor) as backward completes each tensor, before its bucket may launch
  // (fault drills plant non-finite gradients here); set before the first step.
  void set_gradient_hook(std::function<void(int64_t step, int tensor)> hook) { hook_ = std::move(hook); }
  // With FP8 compute: called with (step, FP8 tensor, data, dtype) before each cast of an output
  // gradient (fault drills plant non-finite values into one); set before the first step.
  void set_fp8_gradient_hook(std::function<void(int64_t step, int fp8_tensor, void* data, DType dtype)> hook);
  // false: never capture (faults planted from the host in the middle of a step). Never captured
  // either: steps of several micro-batches (each staged from the host mid-step) and stage 2's
  // (pages returned and mapped by host calls during the step).
  void allow_capture(bool allow) { use_graph_ = allow && accum_ == 1 && !release_ && be_.capture().can_capture(); }
  bool releases() const { return release_; }  // distributed.zero 2 on more than one rank

  // The FP32 state moves between the host and the ranks in pieces of whole-model elements, so that
  // no rank holds a copy of the whole model beside it (train/state_stream.h carries the pieces).
  enum class Slot { Masters, State1, State2 };  // the states: the optimizer's moments (has_state)
  static constexpr size_t kStreamElements = size_t(16) << 20;  // elements of a piece (64 MiB of FP32)
  // For tests: smaller pieces, so that reads cross piece boundaries inside a shard's blocks.
  void set_piece_elements(size_t n) { piece_ = std::max<size_t>(n, 1); }
  // Elements [begin, begin + count) of a slot, every rank given the same: this rank keeps those of
  // its shard; Masters also sets the working copy's, cast from them (round to nearest even). Loading
  // a slot's last element also zeroes its shard's padding.
  void load(Slot slot, size_t begin, const float* host, size_t count);
  // A slot's elements in layout order, as consecutive pieces fn(begin, values, count) on rank 0
  // (values valid during the call). Collective when the slot is sharded (the other ranks send
  // their blocks bucket by bucket: rank 0 holds one bucket at a time); fn is never called elsewhere.
  using PieceFn = std::function<void(size_t begin, const float* values, size_t count)>;
  void read(Slot slot, const PieceFn& fn) const;
  // Rank 0: a slot's elements whole (read() into one vector); empty elsewhere.
  std::vector<float> read_whole(Slot slot) const;
  // For tests: the masters whole on every rank: this rank's own copy where it holds them whole,
  // else rank 0's assembled copy sent to all (collective).
  std::vector<float> masters_everywhere() const;
  bool has_state(int which) const { return (which == 1 ? state1_ : state2_).data() != nullptr; }
  // hash64 of a slot's elements in layout order (params_hash, optimizer_state_hash), every rank the
  // same; without a copy where the backend's memory is the host's and holds whole tensors.
  // Collective when sharded.
  uint64_t slot_hash(Slot slot) const;
  uint64_t masters_hash() const { return slot_hash(Slot::Masters); }
  uint64_t state_hash(int which) const { return slot_hash(which == 1 ? Slot::State1 : Slot::State2); }  // a state held
  // The FP32 masters this rank holds (sharded 16-bit compute: its shard) and the tensors' ranges in them.
  float* master_data() {
    if (compute_ == DType::F32) settle_gathers();  // FP32 sharded: the masters are the gathered working weights
    return master_.as<float>();
  }
  const std::vector<TensorSpan>& master_spans() const { return master_spans_; }
  size_t master_count() const { return master_count_; }
  // What must agree across ranks after a step: the masters (replicated), or the all-gathered
  // working copy (sharded).
  uint64_t replica_hash() const;
  // precision.compute fp8: a hash of the FP8 scales, histories and ring position (0 without FP8).
  uint64_t fp8_hash() const;
  void* replica_data() { return shards_ ? const_cast<void*>(working_params()) : master_.data(); }
  DType replica_dtype() const { return shards_ ? compute_ : DType::F32; }
  bool sharded() const { return shards_ != nullptr; }
  const StateBytes& state_bytes() const { return bytes_; }
  // distributed.zero 2: the most bytes of the 16-bit gradient buffer resident when backward
  // completed a tensor in the process's first steps, measured where the backend can tell (0: not
  // measured), and the count.
  size_t gradient_resident_peak() const { return resident_peak_; }
  size_t gradient_window_bytes() const { return release_ ? bytes_window_ : 0; }
  // The working weights as the model reads them, whole (sharded with overlap: once the update's
  // all-gather, overlapped with the next forward, has completed: settle_gathers()).
  const void* working_params() const {
    settle_gathers();
    return working_copy();
  }
  // Sharded with overlap: waits for the all-gather of the updated working weights launched by the
  // last step (the next step's forward waits for each layer's own as it reaches it).
  void settle_gathers() const {
    if (reducer_) reducer_->settle_gathers();
  }
  const void* gradients() const { return grads_.data(); }

  // One step: the host part (batch, learning rate), then the device part, captured into a graph
  // at step first_step + kWarmupStepsBeforeCapture and replayed from then on where the backend can.
  // idx: this rank's batch x accum samples, micro-batch after micro-batch.
  void run(int64_t step, int64_t first_step, const Dataset& train, const std::vector<uint32_t>& idx, float lr);

  MixedPrecision& amp() { return *amp_; }
  const MixedPrecision& amp() const { return *amp_; }
  StepSums read_sums() const;
  void load_sums(float loss_sum, int32_t correct);
  void clear_sums();

  // Communication of the latest measured step, summed over the run (summary.json).
  struct CommTotals {
    double seconds = 0, exposed_seconds = 0;
    size_t bytes_per_step = 0;           // gradients all-reduced (or reduce-scattered)
    size_t gathered_bytes_per_step = 0;  // sharded: working weights all-gathered
    int64_t gathers_awaited_by_forward = 0, gathers_settled = 0;  // overlapped all-gathers (buckets)
    int64_t steps = 0;
  };
  void take_comm_stats();  // polls the reducer; call when the device has caught up for the last step
  const CommTotals& comm_totals() const { return comm_; }
  bool reducing() const { return reducer_ != nullptr; }

 private:
  // Everything after the uploads: capturable when there is one micro-batch (train and idx stage
  // micro-batches 1, 2, ... otherwise).
  void device_step(int64_t step, const Dataset& train, const uint32_t* idx);
  const void* working_copy() const { return compute_ == DType::F32 ? master_.data() : lp_.data(); }
  void accumulate(int tensor, bool first);  // a micro-batch before the last: acc32[t] (+)= its gradient
  void fold_accumulated(int tensor);        // the last micro-batch's gradient of `tensor` += the FP32 sum
  void measure_resident();
  void commit_grads(int first, int last);  // stage 2: before backward writes tensors [first, last]
  void begin_returns();                    // stage 2, a micro-batch before the last: nothing complete yet
  void return_completed(int tensor);       // ...: backward completed `tensor`; return what lies above
  void optimizer_update();         // the optimizer over the masters this rank holds
  struct OptimizerRun {
    size_t begin, end;  // flat elements
    bool decay;         // weight decay applies (optimizer.decay, the tensors' attributes)
  };
  std::vector<OptimizerRun> optimizer_runs() const;
  void optimizer_range(size_t flat_begin, size_t count, size_t at, const AmpVerdict& verdict);
  const Buffer& buffer(Slot slot) const;
  size_t piece_ = kStreamElements;  // elements a read moves at a time (set_piece_elements)
  bool slot_sharded(Slot slot) const { return shards_ && (slot != Slot::Masters || compute_ != DType::F32); }

  const Config& cfg_;
  Backend& be_;
  DeviceMemory& mem_;
  ComputeOps& ops_;
  Model& model_;
  DType compute_;
  size_t batch_, accum_;
  int rank_, world_;
  float inv_count_ = 0;  // loss weight / (batch x world x loss terms per sample): one micro-batch's mean
  bool use_graph_ = false, graph_ready_ = false;
  size_t chunk_ = 0;      // elements of FP32 unscaled gradients held (g32_)
  size_t pass_ = 0;       // elements the optimizer unscales and updates at a time (at most chunk_)
  bool release_ = false;  // distributed.zero 2: the gradient buffer's memory returned once reduced
  size_t resident_peak_ = 0, bytes_window_ = 0;
  static constexpr int kMeasuredSteps = 2;  // stage 2: steps whose window is measured
  int steps_measured_ = 0;
  std::vector<char> done_;      // stage 2, accumulation: tensors completed in this backward
  int low_tensor_ = 0;          //   every tensor from here on is complete
  size_t returned_from_ = 0;    //   bytes of the buffer from here on are returned
  Communicator* world_comm_ = nullptr;
  Communicator* grad_comm_ = nullptr;
  std::function<void(int64_t, int)> hook_;
  Fp8Binding fp8_binding_;  // what the model's FP8 casts use (FP8 compute)
  int64_t step_now_ = 0;    // the step under way (for the FP8 gradient hook)

  // Destroyed bottom up, after ~TrainStep() dropped the graph: the reducer (its pending requests),
  // the device communicator (an abort must not wait behind buffer frees, which synchronize the
  // device), then the flags and the buffers.
  std::unique_ptr<ShardLayout> shards_;  // sharded optimizer state only
  std::vector<OptimizerRun> runs_;
  std::vector<TensorSpan> master_spans_;
  size_t master_count_ = 0;
  StateBytes bytes_;
  Buffer master_, lp_, grads_, gshard_, g32_, state1_, state2_, sums_;
  Buffer acc32_;  // accum > 1: the earlier micro-batches' (scaled) gradients summed in FP32
  StepSums* sums_dev_ = nullptr;
  std::unique_ptr<MixedPrecision> amp_;
  std::unique_ptr<Communicator> device_comm_;
  std::unique_ptr<GradReducer> reducer_;
  int64_t comm_measured_ = 0;
  CommTotals comm_;
};

}  // namespace amp
