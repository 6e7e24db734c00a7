#include "train/step.h"

#include <limits>

#include "comm/watchdog.h"
#include "core/error.h"
#include "core/format.h"

namespace amp {

TrainStep::TrainStep(const Config& cfg, Backend& be, Model& model, DType compute, size_t batch, int rank, int world)
    : cfg_(cfg), be_(be), model_(model), compute_(compute), batch_(batch), rank_(rank), world_(world) {
  const ParamLayout& L = model_.layout();
  const size_t n = L.total;
  master_ = be_.alloc(n * sizeof(float));
  if (compute_ != DType::F32) lp_ = be_.alloc(n * dtype_size(compute_));
  grads_ = be_.alloc(n * dtype_size(compute_));
  g32_ = be_.alloc(n * sizeof(float));
  const OptimizerParams& opt = cfg_.optimizer.params;
  const bool adam = opt.kind == OptimizerKind::AdamW;
  if (adam || opt.momentum != 0.0f) state1_ = be_.alloc(n * sizeof(float));
  if (adam) state2_ = be_.alloc(n * sizeof(float));
  sums_ = be_.alloc(sizeof(StepSums));
  sums_dev_ = sums_.as<StepSums>();

  std::vector<std::string> names;
  for (const ParamInfo& t : L.tensors) names.push_back(t.name);
  amp_ = std::make_unique<MixedPrecision>(be_, be_, cfg_.precision.scaler, compute_, L.spans(), std::move(names), rank_,
                                          world_);
  // The backward seed's 1/N: the mean over the global batch, so the all-reduce is a plain sum of
  // pre-divided gradients (it cannot overflow where the mean would not).
  inv_count_ = float(cfg_.model.loss_weight / double(batch_ * size_t(world_) * model_.loss_terms_per_sample()));
}

TrainStep::~TrainStep() { be_.release_capture(); }

void TrainStep::connect(Communicator& world_comm, std::unique_ptr<Communicator> device_comm, bool overlap) {
  world_comm_ = &world_comm;
  device_comm_ = std::move(device_comm);
  grad_comm_ = device_comm_ ? device_comm_.get() : &world_comm;
  if (world_ < 2) return;
  const ParamLayout& L = model_.layout();
  reducer_ = std::make_unique<GradReducer>(
      *grad_comm_, L.spans(), L.total, compute_, grads_.data(), size_t(cfg_.distributed.first_bucket_mb * kBytesPerMiB),
      size_t(cfg_.distributed.bucket_mb * kBytesPerMiB),
      [this](size_t begin, size_t end) { amp_->check_bucket(grads_.data(), begin, end); });
  reducer_->set_overlap(overlap);
}

void TrainStep::load_masters(const float* host) {
  const size_t n = model_.layout().total;
  be_.upload(master_.data(), host, n * sizeof(float));
  if (compute_ != DType::F32) be_.cast(master_.data(), DType::F32, lp_.data(), compute_, n);
}

void TrainStep::load_states(const float* state1, const float* state2) {
  const size_t bytes = model_.layout().total * sizeof(float);
  if (state1_.data() && state1) be_.upload(state1_.data(), state1, bytes);
  if (state2_.data() && state2) be_.upload(state2_.data(), state2, bytes);
}

std::vector<float> TrainStep::masters() const {
  std::vector<float> w(model_.layout().total);
  be_.download(w.data(), master_.data(), w.size() * sizeof(float));
  return w;
}

std::vector<float> TrainStep::state(int which) const {
  const Buffer& b = which == 1 ? state1_ : state2_;
  if (!b.data()) return {};
  std::vector<float> s(model_.layout().total);
  be_.download(s.data(), b.data(), s.size() * sizeof(float));
  return s;
}

StepSums TrainStep::read_sums() const {
  StepSums s;
  be_.download(&s, sums_dev_, sizeof s);
  return s;
}

void TrainStep::load_sums(float loss_sum, int32_t correct) {
  StepSums s = read_sums();
  s.loss_sum = loss_sum;
  s.correct = correct;
  be_.upload(sums_dev_, &s, sizeof s);
}

void TrainStep::clear_sums() { be_.zero(&sums_dev_->loss_sum, sizeof(float) + sizeof(int32_t)); }

void TrainStep::run(int64_t step, int64_t first_step, const Dataset& train, const std::vector<uint32_t>& idx,
                    float lr) {
  world_comm_->set_step(step);
  grad_comm_->check_async_errors();
  if (reducer_) take_comm_stats();  // the previous step's, read before this one is enqueued
  // A device backend's host waits inside a step are waits on the collectives enqueued with it.
  Watchdog::Detail device_detail;
  device_detail.note = "its kernels and NCCL collectives";
  Watchdog::Wait device_wait(be_.host_accessible() ? nullptr : world_comm_->watchdog(), "the device step",
                             device_detail);
  model_.stage(train, idx.data(), 0, batch_);
  be_.upload(&sums_dev_->lr, &lr, sizeof lr);
  if (graph_ready_) {
    be_.replay();
    return;
  }
  // Capture after the warm-up steps of this process (first-use allocations and library set-up
  // stay outside), so a resumed run is captured too.
  const bool capture = use_graph_ && step == first_step + kWarmupStepsBeforeCapture && be_.begin_capture();
  device_step(step);
  if (capture) {
    be_.end_capture();
    be_.replay();
    graph_ready_ = true;
  }
}

// The step protocol (docs/design.md), every call enqueued on the backend: nothing here waits for
// the device, so the whole function can be captured into a CUDA graph.
void TrainStep::device_step(int64_t step) {
  MixedPrecision& amp = *amp_;
  amp.begin_step();  // flags cleared
  const void* params = working_params();
  // Forward and loss; the output gradient is seeded with loss x S x 1/N.
  model_.forward_loss(params, batch_, amp.scale(), inv_count_, true, LossSums{&sums_dev_->loss_sum, &sums_dev_->correct});
  // Backward; each bucket is checked into this rank's flag slot, then summed while backward goes on.
  if (reducer_) reducer_->begin_step();
  model_.backward(params, grads_.data(), batch_, [&](int t) {
    if (hook_) hook_(step, t);
    if (reducer_) reducer_->tensor_ready(t);
  });
  if (reducer_) reducer_->finish();
  // Unscale into FP32, find non-finite values, squared norm: one fused pass.
  amp.unscale_and_check(grads_.data(), g32_.as<float>());
  // The global overflow flag (and who saw what): one MAX all-reduce; every rank skips or steps together.
  amp.agree(grad_comm_);
  const float max_norm = float(cfg_.optimizer.grad_clip);
  amp.check_norm(max_norm);
  // The optimizer on the FP32 masters (skipped when the flag is set), writing the working copy.
  be_.optimizer_step(cfg_.optimizer.params, &sums_dev_->lr, max_norm, master_.as<float>(), g32_.as<float>(),
                     state1_.as<float>(), state2_.as<float>(), model_.layout().total,
                     compute_ == DType::F32 ? nullptr : lp_.data(), compute_, amp.flags(), amp.norm_sq(), amp.state());
  // The one shared scale moves (identically on every rank: same flags, same state).
  amp.update();
}

// The reducer's timing of the latest measured step (device backends measure with events and report
// a step once it has completed, so a measurement may arrive a step late or not at all).
void TrainStep::take_comm_stats() {
  if (!reducer_) return;
  const ReducerStats& rs = reducer_->last_step();
  comm_.bytes_per_step = rs.bytes;
  if (rs.measured == comm_measured_) return;
  comm_measured_ = rs.measured;
  comm_.seconds += rs.comm_seconds;
  comm_.exposed_seconds += rs.exposed_seconds;
  ++comm_.steps;
}

}  // namespace amp
