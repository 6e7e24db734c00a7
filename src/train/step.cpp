#include "train/step.h"

#include <algorithm>
#include <limits>

#include "comm/watchdog.h"
#include "core/convert.h"
#include "core/error.h"
#include "core/format.h"
#include "core/hash.h"

namespace amp {

TrainStep::TrainStep(const Config& cfg, Backend& be, Model& model, DType compute, size_t batch, size_t accum, int rank,
                     int world)
    : cfg_(cfg), be_(be), mem_(be.memory()), ops_(be.ops()), model_(model), compute_(compute), batch_(batch), accum_(accum), rank_(rank), world_(world) {
  AMP_CHECK(accum_ >= 1, "TrainStep: accum must be at least 1");
  const ParamLayout& L = model_.layout();
  const size_t n = L.total, es = dtype_size(compute_);
  const bool f32 = compute_ == DType::F32;
  if (cfg_.distributed.zero >= 1 && world_ > 1)
    shards_ = std::make_unique<ShardLayout>(L.spans(), n, es, size_t(cfg_.distributed.first_bucket_mb * kBytesPerMiB),
                                            size_t(cfg_.distributed.bucket_mb * kBytesPerMiB), world_, rank_);
  // Flat buffers hold every element (padded when sharded); optimizer state only what this rank updates.
  const size_t flat = shards_ ? shards_->padded() : n;
  const size_t held = shards_ ? shards_->shard_size() : n;
  std::vector<TensorSpan> shard_spans = shards_ ? shards_->shard_spans(L.spans()) : std::vector<TensorSpan>{};
  // FP32 compute: the masters are the working weights, so every rank holds them all.
  master_count_ = f32 ? flat : held;
  master_spans_ = f32 || !shards_ ? L.spans() : shard_spans;
  master_ = mem_.alloc(master_count_ * sizeof(float));
  if (!f32) lp_ = mem_.alloc(flat * es);
  // Stage 2: the gradient buffer's memory is returned bucket by bucket once reduced (and tensor by
  // tensor in the micro-batches before the last), from an allocation made for it.
  release_ = shards_ && cfg_.distributed.zero == 2;
  AMP_CHECK(!release_ || mem_.release_granularity() > 0, "distributed.zero 2 on a backend that cannot return memory");
  grads_ = release_ ? mem_.alloc_releasable(flat * es) : mem_.alloc(flat * es);
  // Backward announces each layer's gradients before writing them: their memory, returned by the
  // step before or by an earlier micro-batch, comes back there.
  if (release_) model_.set_grads_hook([this](int first, int last) { commit_grads(first, last); });
  if (shards_) gshard_ = mem_.alloc(held * es);
  // The optimizer's FP32 unscaled gradients: a chunk's buffer, filled a pass at a time (pass_elements).
  chunk_ = std::min(held, unscale_chunk(size_t(cfg_.distributed.bucket_mb * kBytesPerMiB)));
  g32_ = mem_.alloc(chunk_ * sizeof(float));
  pass_ = unscale_pass(chunk_, be_.optimizer().pass_elements());
  const int moments = optimizer_moments(cfg_.optimizer.params);
  if (moments >= 1) state1_ = mem_.alloc(held * sizeof(float));
  if (moments >= 2) state2_ = mem_.alloc(held * sizeof(float));
  sums_ = mem_.alloc(sizeof(StepSums));
  sums_dev_ = sums_.as<StepSums>();
  if (accum_ > 1) acc32_ = mem_.alloc(n * sizeof(float));
  StateShape shape;
  shape.params = n, shape.flat = flat, shape.held = held, shape.compute = compute_, shape.moments = moments;
  shape.sharded = shards_ != nullptr, shape.accumulate = accum_ > 1;
  shape.released = release_;
  shape.unscale_chunk = chunk_;
  if (release_)
    shape.window = stage2_window(L.spans(), flat, size_t(cfg_.distributed.bucket_mb * kBytesPerMiB) / es,
                                 mem_.release_granularity() / es);
  bytes_window_ = shape.window * es;
  bytes_ = amp::state_bytes(shape);

  std::vector<std::string> names;
  for (const ParamInfo& t : L.tensors) names.push_back(t.name);
  amp_ = std::make_unique<MixedPrecision>(mem_, be_.amp_kernels(), cfg_.precision.scaler, compute_, L.spans(), std::move(names), rank_,
                                          world_);
  if (shards_) amp_->shard(std::move(shard_spans));
  // precision.compute fp8: the model's FP8 tensors get their scales and amax words (in the flag
  // buffer: the step's one all-reduce carries them).
  if (std::vector<Fp8Tensor> fp8 = model_.fp8_tensors(); !fp8.empty()) {
    amp_->enable_fp8(cfg_.precision.fp8_params, std::move(fp8));
    fp8_binding_ = amp_->fp8_binding();
    fp8_binding_.native_gemm = cfg_.precision.fp8_params.native_gemm && ops_.native_fp8_gemm();
    model_.bind_fp8(fp8_binding_);
  }
  runs_ = optimizer_runs();
  // The backward seed's 1/N: the mean over the global batch of one micro-batch (batch x world), so
  // the all-reduce is a plain sum of pre-divided gradients (it cannot overflow where the mean would
  // not). With accumulation each micro-batch's gradient is such a mean, as large as without it (the
  // loss scale keeps its headroom against underflow), and the fold divides their sum by accum.
  inv_count_ = float(cfg_.model.loss_weight / double(batch_ * size_t(world_) * model_.loss_terms_per_sample()));
}

TrainStep::~TrainStep() {
  model_.set_weights_hook(nullptr);
  model_.set_grads_hook(nullptr);
  be_.capture().release_capture();
}

void TrainStep::set_fp8_gradient_hook(std::function<void(int64_t, int, void*, DType)> hook) {
  AMP_CHECK(amp_->fp8(), "set_fp8_gradient_hook: FP8 compute is off");
  fp8_binding_.before_grad_cast = [this, hook = std::move(hook)](int t, void* data, DType dtype) {
    hook(step_now_, t, data, dtype);
  };
  model_.bind_fp8(fp8_binding_);
}

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
  if (shards_) reducer_->shard(*shards_, gshard_.data());
  // Sharded with overlap, the update's all-gather runs while the next forward pass starts: each
  // layer waits for its own weights' buckets (GradReducer::launch_gathers).
  if (shards_ && overlap)
    model_.set_weights_hook([this](int first, int last) { reducer_->wait_gathered(first, last); });
  if (release_)
    reducer_->release_reduced([this](void* p, size_t bytes) { mem_.release(p, bytes); }, mem_.release_granularity());
}

const Buffer& TrainStep::buffer(Slot slot) const {
  return slot == Slot::Masters ? master_ : slot == Slot::State1 ? state1_ : state2_;
}

void TrainStep::load(Slot slot, size_t begin, const float* host, size_t count) {
  settle_gathers();  // nothing may still write the working copy
  const size_t n = model_.layout().total;
  AMP_CHECK(begin <= n && count <= n - begin, "TrainStep::load: elements [", begin, ", ", begin + count, ") of ", n);
  char* dst = static_cast<char*>(buffer(slot).data());
  AMP_CHECK(dst, "TrainStep::load: an optimizer state not held");
  if (!slot_sharded(slot)) {
    mem_.upload(dst + begin * sizeof(float), host, count * sizeof(float));
  } else {
    shards_->flat_runs(begin, begin + count, [&](size_t f, size_t sh, size_t c) {
      mem_.upload(dst + sh * sizeof(float), host + (f - begin), c * sizeof(float));
    });
    if (begin + count == n)
      shards_->flat_runs(n, shards_->padded(), [&](size_t, size_t sh, size_t c) { mem_.zero(dst + sh * sizeof(float), c * sizeof(float)); });
  }
  if (slot != Slot::Masters || compute_ == DType::F32) return;
  char* lp = static_cast<char*>(lp_.data()) + begin * dtype_size(compute_);
  if (!shards_) {  // the working copy cast from the masters just loaded
    ops_.cast(dst + begin * sizeof(float), DType::F32, lp, compute_, count);
    return;
  }
  // Sharded: this rank holds only its masters, so the piece is converted on the host (round to
  // nearest even, as the backends' casts).
  std::vector<uint16_t> half(count);
  convert(host, DType::F32, half.data(), compute_, count);
  mem_.upload(lp, half.data(), count * sizeof(uint16_t));
}

void TrainStep::read(Slot slot, const PieceFn& fn) const {
  if (slot == Slot::Masters) settle_gathers();  // FP32 compute, sharded: master_ is the working copy the all-gather writes
  const Buffer& buf = buffer(slot);
  AMP_CHECK(buf.data(), "TrainStep::read: an optimizer state not held");
  const size_t n = model_.layout().total;
  if (!slot_sharded(slot)) {  // every element here: rank 0 reads its own
    if (rank_ != 0) return;
    if (mem_.host_accessible()) return fn(0, buf.as<float>(), n);
    std::vector<float> piece(std::min(n, piece_));
    for (size_t b = 0; b < n; b += piece.size()) {
      const size_t c = std::min(piece.size(), n - b);
      mem_.download(piece.data(), buf.as<float>() + b, c * sizeof(float));
      fn(b, piece.data(), c);
    }
    return;
  }
  // Bucket by bucket in flat order: the ranks' blocks of a bucket, in rank order, are its elements
  // in order; gathered to rank 0 a sub-block of at most piece_ elements per rank at a time.
  std::vector<size_t> order(shards_->buckets().size());
  for (size_t b = 0; b < order.size(); ++b) order[b] = b;
  std::sort(order.begin(), order.end(),
            [&](size_t x, size_t y) { return shards_->buckets()[x].begin < shards_->buckets()[y].begin; });
  // A block sent whole lands in place (rank r's at r x block); one sent in parts goes through `all`.
  // Host memory is sent from where it lies.
  const size_t world = size_t(world_);
  const bool host = mem_.host_accessible();
  std::vector<float> mine, all, bucket;
  for (size_t b : order) {
    const Bucket& bk = shards_->buckets()[b];
    const ShardPiece p = shards_->piece(b, rank_);
    if (bk.begin >= n) continue;  // padding only
    if (rank_ == 0) bucket.resize(bk.end - bk.begin);
    const bool whole = p.count <= piece_;
    for (size_t at = 0; at < p.count; at += piece_) {
      const size_t c = std::min(piece_, p.count - at);
      const float* send = buf.as<float>() + p.shard_begin + at;
      if (!host) {
        mine.resize(c);
        mem_.download(mine.data(), send, c * sizeof(float));
        send = mine.data();
      }
      if (rank_ == 0 && !whole) all.resize(c * world);
      world_comm_->gather(send, rank_ != 0 ? nullptr : whole ? bucket.data() : all.data(), c * sizeof(float), 0);
      if (rank_ != 0 || whole) continue;
      for (size_t r = 0; r < world; ++r)
        std::copy(all.begin() + long(r * c), all.begin() + long((r + 1) * c), bucket.begin() + long(r * p.count + at));
    }
    if (rank_ == 0) fn(bk.begin, bucket.data(), std::min(bk.end, n) - bk.begin);
  }
}

std::vector<float> TrainStep::read_whole(Slot slot) const {
  std::vector<float> out(rank_ == 0 ? model_.layout().total : 0);
  read(slot, [&](size_t b, const float* v, size_t c) { std::copy(v, v + c, out.begin() + long(b)); });
  return out;
}

std::vector<float> TrainStep::masters_everywhere() const {
  const size_t n = model_.layout().total;
  if (slot_sharded(Slot::Masters)) {
    std::vector<float> w = read_whole(Slot::Masters);
    w.resize(n);  // empty on ranks but 0
    world_comm_->broadcast(view_of(w.data(), n), 0);
    return w;
  }
  settle_gathers();
  std::vector<float> w(n);
  mem_.download(w.data(), master_.data(), n * sizeof(float));
  return w;
}

namespace {

// hash64 of backend memory: read where it is when that is host memory (a model's state is hundreds
// of MB: no copy), else from host copies of a piece at a time.
uint64_t hash_in_place(DeviceMemory& mem, const void* p, size_t bytes, size_t piece_bytes) {
  if (mem.host_accessible()) return hash64(p, bytes);
  Hasher h;
  std::vector<char> piece(std::min(bytes, piece_bytes));
  for (size_t at = 0; at < bytes; at += piece.size()) {
    const size_t c = std::min(piece.size(), bytes - at);
    mem.download(piece.data(), static_cast<const char*>(p) + at, c);
    h.update(piece.data(), c);
  }
  return h.digest();
}

}  // namespace

uint64_t TrainStep::slot_hash(Slot slot) const {
  if (!slot_sharded(slot)) {  // every rank holds (and hashes) the whole
    if (slot == Slot::Masters) settle_gathers();
    AMP_CHECK(buffer(slot).data(), "TrainStep: the hash of an optimizer state not held");
    return hash_in_place(mem_, buffer(slot).data(), model_.layout().total * sizeof(float), piece_ * sizeof(float));
  }
  Hasher h;
  read(slot, [&](size_t, const float* v, size_t c) { h.update(v, c * sizeof(float)); });
  uint64_t digest = rank_ == 0 ? h.digest() : 0;
  world_comm_->broadcast(BufView{&digest, sizeof digest, DType::U8}, 0);
  return digest;
}

uint64_t TrainStep::replica_hash() const {
  if (!shards_) return masters_hash();
  return hash_in_place(mem_, working_params(), model_.layout().total * dtype_size(compute_), piece_ * sizeof(float));
}

uint64_t TrainStep::fp8_hash() const {
  const Fp8State* f = amp_->fp8();
  if (!f) return 0;
  const Fp8State::Host h = f->read();
  const uint64_t parts[3] = {hash64(h.scales.data(), h.scales.size() * sizeof(float)),
                             hash64(h.history.data(), h.history.size() * sizeof(float)), hash64(&h.meta, sizeof h.meta)};
  return hash64(parts, sizeof parts);
}

StepSums TrainStep::read_sums() const {
  StepSums s;
  mem_.download(&s, sums_dev_, sizeof s);
  return s;
}

void TrainStep::load_sums(float loss_sum, int32_t correct) {
  StepSums s = read_sums();
  s.loss_sum = loss_sum;
  s.correct = correct;
  mem_.upload(sums_dev_, &s, sizeof s);
}

void TrainStep::clear_sums() { mem_.zero(&sums_dev_->loss_sum, sizeof(float) + sizeof(int32_t)); }

void TrainStep::run(int64_t step, int64_t first_step, const Dataset& train, const std::vector<uint32_t>& idx,
                    float lr) {
  world_comm_->set_step(step);
  grad_comm_->check_async_errors();
  if (reducer_) take_comm_stats();  // the previous step's, read before this one is enqueued
  // A device backend's host waits inside a step are waits on the collectives enqueued with it.
  Watchdog::Detail device_detail;
  device_detail.note = "its kernels and NCCL collectives";
  Watchdog::Wait device_wait(mem_.host_accessible() ? nullptr : world_comm_->watchdog(), "the device step",
                             device_detail);
  model_.stage(train, idx.data(), 0, batch_);
  mem_.upload(&sums_dev_->lr, &lr, sizeof lr);
  if (graph_ready_) {
    be_.capture().replay();
    return;
  }
  // Capture after the warm-up steps of this process (first-use allocations and library set-up
  // stay outside), so a resumed run is captured too.
  const bool capture = use_graph_ && step == first_step + kWarmupStepsBeforeCapture && be_.capture().begin_capture();
  device_step(step, train, idx.data());
  if (capture) {
    be_.capture().end_capture();
    be_.capture().replay();
    graph_ready_ = true;
  }
}

// The step protocol (docs/design.md), every call enqueued on the backend: nothing here waits for
// the device, so with one micro-batch the whole function can be captured into a CUDA graph.
void TrainStep::device_step(int64_t step, const Dataset& train, const uint32_t* idx) {
  MixedPrecision& amp = *amp_;
  step_now_ = step;
  amp.begin_step();  // flags cleared
  const void* params = working_copy();  // the forward waits for each layer's all-gather (overlap)
  // Micro-batch 0 was staged by run(); with gradient accumulation the ones before the last have
  // their scaled 16-bit gradients summed into acc32 (FP32), and the last one's join them tensor by
  // tensor as its backward completes them.
  for (size_t i = 0; i < accum_; ++i) {
    if (i > 0) model_.stage(train, idx + i * batch_, 0, batch_);
    // Forward and loss; the output gradient is seeded with loss x S x 1/N.
    model_.forward_loss(params, batch_, amp.scale(), inv_count_, true,
                        LossSums{&sums_dev_->loss_sum, &sums_dev_->correct});
    if (i + 1 < accum_) {
      if (release_) begin_returns();
      model_.backward(params, grads_.data(), batch_, [&](int t) { accumulate(t, i == 0); });
    }
  }
  // The last backward; each bucket is checked into this rank's flag slot, then summed while
  // backward goes on. (The forward passes have waited for every layer's all-gather; the padding's
  // are settled here.)
  settle_gathers();
  if (reducer_) reducer_->begin_step();
  // Stage 2's window is measured in the process's first steps only (every step writes the buffer
  // in the same order; mincore walks the whole buffer once per tensor).
  const bool measuring = release_ && steps_measured_ < kMeasuredSteps;
  model_.backward(params, grads_.data(), batch_, [&](int t) {
    if (accum_ > 1) fold_accumulated(t);
    if (hook_) hook_(step, t);
    if (measuring) measure_resident();  // before its bucket may go
    if (reducer_) reducer_->tensor_ready(t);
  });
  if (reducer_) reducer_->finish();
  if (measuring) ++steps_measured_;
  // Find non-finite values and the squared norm of the unscaled gradients: one fused pass (sharded:
  // over this rank's reduced shard, the norm² a partial).
  amp.unscale_and_check(shards_ ? gshard_.data() : grads_.data());
  // The global overflow flag (and who saw what, and the partial norms): one MAX all-reduce; every
  // rank skips or steps together.
  amp.agree(grad_comm_);
  amp.check_norm(float(cfg_.optimizer.grad_clip));
  // The optimizer on the FP32 masters (skipped when the flag is set), writing the working copy;
  // sharded: on this rank's shard, then the working copy is all-gathered.
  optimizer_update();
  // The one shared scale moves (identically on every rank: same flags, same state).
  amp.update();
  // Steps captured into a CUDA graph end with their all-gather joined: a capture must rejoin its
  // streams, and a replay's forward could not wait for the previous replay's events. (Eager steps
  // before the capture do the same, so that none leaves a gather the capture would wait for.)
  if (use_graph_) settle_gathers();
}

// Stage 2, a micro-batch before the last: the gradient buffer goes back from its end down as
// backward completes the tensors (the last layer's first); a tensor completed out of order (the
// tied embedding, at the start of the buffer, written first and completed last) holds back only
// what lies below it. The buffer is page-aligned (alloc_releasable), so offsets round as addresses.
void TrainStep::begin_returns() {
  done_.assign(model_.layout().tensors.size(), 0);
  low_tensor_ = int(done_.size());
  returned_from_ = grads_.bytes();
}

void TrainStep::return_completed(int tensor) {
  done_[size_t(tensor)] = 1;
  const ParamLayout& L = model_.layout();
  while (low_tensor_ > 0 && done_[size_t(low_tensor_ - 1)]) --low_tensor_;
  if (size_t(low_tensor_) == done_.size()) return;  // nothing at the end is complete yet
  const size_t page = mem_.release_granularity(), es = dtype_size(compute_);
  const size_t low = low_tensor_ > 0 ? L.tensors[size_t(low_tensor_)].span.offset * es : 0;
  const size_t from = (low + page - 1) / page * page;
  if (from >= returned_from_) return;
  mem_.release(static_cast<char*>(grads_.data()) + from, returned_from_ - from);
  returned_from_ = from;
}

// Stage 2: the gradient memory of tensors [first, last] brought back before backward writes it. A
// tensor owns the bytes up to the next one (the padding after the last goes with it), as the
// reducer's buckets read them.
void TrainStep::commit_grads(int first, int last) {
  const std::vector<ParamInfo>& t = model_.layout().tensors;
  const size_t es = dtype_size(compute_);
  const size_t begin = t[size_t(first)].span.offset * es;
  const size_t end = size_t(last) + 1 < t.size() ? t[size_t(last) + 1].span.offset * es : grads_.bytes();
  AMP_CHECK(first <= last && begin <= end, "commit_grads: tensors ", first, "..", last, " out of layout order");
  mem_.commit(static_cast<char*>(grads_.data()) + begin, end - begin);
}

// acc32[t] = float(grads[t]) for the first micro-batch, acc32[t] += float(grads[t]) for the next
// ones, tensor by tensor as backward completes them (elementwise: the bits of one pass over the
// buffer); stage 2 then returns what is complete.
void TrainStep::accumulate(int tensor, bool first) {
  const TensorSpan s = model_.layout().tensors[size_t(tensor)].span;
  const size_t es = dtype_size(compute_);
  void* g = static_cast<char*>(grads_.data()) + s.offset * es;
  float* a = acc32_.as<float>() + s.offset;
  if (first)
    ops_.cast(g, compute_, a, DType::F32, s.count);
  else
    ops_.add(AddArgs{a, DType::F32, g, compute_, a, DType::F32, int64_t(s.count)});
  if (release_) {
    if (steps_measured_ < kMeasuredSteps) measure_resident();
    return_completed(tensor);
  }
}

// Stage 2: the gradient buffer's resident bytes when a tensor is complete (before its memory may
// go), the high-water mark kept: what the window of state_bytes() counts, measured.
void TrainStep::measure_resident() {
  const size_t r = mem_.resident_bytes(grads_.data(), grads_.bytes());
  if (r > resident_peak_) resident_peak_ = r;
}

// grads[t] = round((acc32[t] + float(grads[t])) / accum): the step's gradient of tensor t, the mean
// of its micro-batches' gradients, summed in FP32 and rounded once more to the compute dtype (a
// non-finite micro-batch gradient reaches it, and the checks that follow skip the step).
void TrainStep::fold_accumulated(int tensor) {
  const TensorSpan s = model_.layout().tensors[size_t(tensor)].span;
  const size_t es = dtype_size(compute_);
  void* g = static_cast<char*>(grads_.data()) + s.offset * es;
  ops_.add(AddArgs{acc32_.as<float>() + s.offset, DType::F32, g, compute_, g, compute_, int64_t(s.count),
                  float(1.0 / double(accum_))});
}

// Runs of the flat parameter buffer that share their optimizer attributes (weight decay or not),
// in order and covering [0, total): the padding after a tensor goes with it. One run when every
// tensor is treated alike (weight_decay 0, or optimizer.decay all).
std::vector<TrainStep::OptimizerRun> TrainStep::optimizer_runs() const {
  const ParamLayout& L = model_.layout();
  const bool decays = cfg_.optimizer.params.weight_decay != 0.0f;
  std::vector<OptimizerRun> runs;
  for (size_t t = 0; t < L.tensors.size(); ++t) {
    const bool decay = decays && (cfg_.optimizer.decay == DecayChoice::All || L.tensors[t].decay);
    const size_t begin = t == 0 ? 0 : L.tensors[t].span.offset;
    if (!runs.empty() && runs.back().decay == decay) continue;
    if (!runs.empty()) runs.back().end = begin;
    runs.push_back(OptimizerRun{begin, L.total, decay});
  }
  if (runs.empty()) runs.push_back(OptimizerRun{0, L.total, false});
  return runs;
}

// The optimizer over flat elements [flat_begin, flat_begin + count) of the parameters, held at
// [at, at + count) of this rank's masters, gradients and moments, one call per run of like tensors.
void TrainStep::optimizer_range(size_t flat_begin, size_t count, size_t at, const AmpVerdict& verdict) {
  const bool f32 = compute_ == DType::F32;
  const size_t es = dtype_size(compute_);
  float* s1 = state1_.as<float>();
  float* s2 = state2_.as<float>();
  const char* g16 = static_cast<const char*>(shards_ ? gshard_.data() : grads_.data());  // indexed where held
  for (const OptimizerRun& r : runs_) {
    const size_t rb = std::max(r.begin, flat_begin), re = std::min(r.end, flat_begin + count);
    // A pass at a time (at most a chunk, the backend's pass_elements): the reduced gradients
    // unscaled into g32 (the values the fused pass checked), then the update. Elementwise, so the
    // passes do not change a bit.
    for (size_t b = rb; b < re; b += pass_) {
      const size_t e = std::min(re, b + pass_);
      const size_t h = at + (b - flat_begin);  // where it is held
      amp_->unscale(g16 + h * es, e - b, g32_.as<float>());
      OptimizerStepArgs a;
      a.params = cfg_.optimizer.params;
      if (!r.decay) a.params.weight_decay = 0.0f;
      a.lr = &sums_dev_->lr;
      a.max_norm = float(cfg_.optimizer.grad_clip);
      a.master = master_.as<float>() + (f32 ? b : h);  // FP32 compute: the masters are the flat working weights
      a.g32 = g32_.as<float>();
      a.state1 = s1 ? s1 + h : nullptr;
      a.state2 = s2 ? s2 + h : nullptr;
      a.n = e - b;
      a.lp = f32 ? nullptr : static_cast<char*>(lp_.data()) + b * es;
      a.lp_dtype = compute_;
      a.verdict = verdict;
      be_.optimizer().optimizer_step(a);
    }
  }
}

void TrainStep::optimizer_update() {
  const AmpVerdict verdict = amp_->verdict();
  if (!shards_) {
    optimizer_range(0, model_.layout().total, 0, verdict);
    return;
  }
  // One range per block: the shard's elements are contiguous, their places in the flat working
  // copy are not.
  for (size_t b = 0; b < shards_->buckets().size(); ++b) {
    const ShardPiece p = shards_->piece(b, rank_);
    optimizer_range(p.flat_begin, p.count, p.shard_begin, verdict);
  }
  void* working = const_cast<void*>(working_copy());
  if (reducer_->overlap())
    reducer_->launch_gathers(working, compute_);  // completed by the next forward, or settle_gathers()
  else
    reducer_->gather_shards(working, compute_);
}

// The reducer's timing of the latest measured step (device backends measure with events and report
// a step once it has completed, so a measurement may arrive a step late or not at all).
void TrainStep::take_comm_stats() {
  if (!reducer_) return;
  const ReducerStats& rs = reducer_->last_step();
  comm_.bytes_per_step = rs.bytes;
  comm_.gathered_bytes_per_step = rs.gathered_bytes;
  comm_.gathers_awaited_by_forward = rs.gathers_awaited_by_forward;
  comm_.gathers_settled = rs.gathers_settled;
  if (rs.measured == comm_measured_) return;
  comm_measured_ = rs.measured;
  comm_.seconds += rs.comm_seconds;
  comm_.exposed_seconds += rs.exposed_seconds;
  ++comm_.steps;
}

}  // namespace amp
