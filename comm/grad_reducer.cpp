#include "comm/grad_reducer.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>

#include "comm/shard_layout.h"
#include "core/error.h"

namespace amp {

std::vector<Bucket> make_buckets(const std::vector<TensorSpan>& spans, size_t total, size_t elem_bytes,
                                 size_t first_bucket_bytes, size_t bucket_bytes, bool keep_empty) {
  std::vector<Bucket> out;
  size_t end = total;
  while (end > 0) {
    const size_t cap_bytes = out.empty() ? first_bucket_bytes : bucket_bytes;
    const size_t cap = std::max<size_t>(1, cap_bytes / elem_bytes);
    const size_t begin = end > cap ? end - cap : 0;
    Bucket b;
    b.begin = begin;
    b.end = end;
    b.first_tensor = -1;
    for (size_t t = 0; t < spans.size(); ++t) {
      const size_t tb = spans[t].offset, te = spans[t].offset + spans[t].count;
      if (tb < end && te > begin) {
        if (b.first_tensor < 0) b.first_tensor = int(t);
        b.last_tensor = int(t);
      }
    }
    if (b.first_tensor >= 0) {
      out.push_back(b);
    } else if (keep_empty) {  // padding only: no tensor to wait for (first > last)
      b.first_tensor = 0;
      b.last_tensor = -1;
      out.push_back(b);
    }  // else a range of padding only needs no reduction
    end = begin;
  }
  return out;
}

GradReducer::GradReducer(Communicator& comm, std::vector<TensorSpan> spans, size_t total, DType dtype, void* grads,
                         size_t first_bucket_bytes, size_t bucket_bytes, BeforeReduce before_reduce)
    : comm_(comm), spans_(std::move(spans)), dtype_(dtype), grads_(grads), before_reduce_(std::move(before_reduce)) {
  buckets_ = make_buckets(spans_, total, dtype_size(dtype), first_bucket_bytes, bucket_bytes);
  rebuild_index();
  // A communicator whose waits do not block the host measures on the device (see ReducerStats).
  clock_ = dynamic_cast<StepClock*>(&comm_);
}

void GradReducer::rebuild_index() {
  of_tensor_.assign(spans_.size(), {});
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (int t = buckets_[b].first_tensor; t <= buckets_[b].last_tensor; ++t) of_tensor_[size_t(t)].push_back(b);
  pending_.assign(buckets_.size(), 0);
}

void GradReducer::shard(const ShardLayout& layout, void* shard_grads) {
  AMP_CHECK(layout.world() == comm_.size() && layout.rank() == comm_.rank(), "shard layout of rank ", layout.rank(),
            " of ", layout.world(), " on rank ", comm_.rank(), " of ", comm_.size());
  shards_ = &layout;
  shard_grads_ = shard_grads;
  buckets_ = layout.buckets();
  rebuild_index();
}

BufView GradReducer::bucket_view(size_t b) const {
  const Bucket& bk = buckets_[b];
  return BufView{static_cast<char*>(grads_) + bk.begin * dtype_size(dtype_), bk.end - bk.begin, dtype_};
}

BufView GradReducer::shard_view(size_t b) const {
  const ShardPiece p = shards_->piece(b, comm_.rank());
  return BufView{static_cast<char*>(shard_grads_) + p.shard_begin * dtype_size(dtype_), p.count, dtype_};
}

void GradReducer::release_reduced(Release release, size_t granularity) {
  AMP_CHECK(shards_ && granularity > 0, "stage 2 needs a shard layout and a release granularity");
  release_ = std::move(release);
  granularity_ = granularity;
}

// Returns the buckets whose reduce-scatter is done, in bucket order. Bucket b covers elements
// [begin, end); buckets run from the buffer's end down, so the page holding bucket b's `end` is
// shared with bucket b - 1, done before it: it goes with b. Bucket 0 ends at the buffer's end, so
// its last partial page stays (it may hold the allocation's tail).
void GradReducer::release_done(bool wait) {
  if (!release_) return;
  const size_t es = dtype_size(dtype_);
  while (released_ < launched_) {
    if (overlap_) {
      std::unique_ptr<Request>& r = requests_[released_];
      if (!wait && !r->test()) return;
    }
    const Bucket& bk = buckets_[released_];
    const size_t lo = bk.begin * es;
    size_t hi = bk.end * es;
    if (released_ > 0) {  // up to the end of the page holding `end` (pages are the addresses')
      const uintptr_t at = reinterpret_cast<uintptr_t>(grads_);
      hi = std::min(size_t((at + hi + granularity_ - 1) / granularity_ * granularity_ - at), buckets_[released_ - 1].end * es);
    }
    release_(static_cast<char*>(grads_) + lo, hi - lo);
    ++released_;
  }
}

void GradReducer::gather_shards(void* buf, DType dtype) {
  AMP_CHECK(shards_, "gather_shards without a shard layout");
  if (!active()) return;
  const auto t0 = std::chrono::steady_clock::now();
  size_t bytes = 0;
  for (const Bucket& bk : buckets_) {
    const BufView all{static_cast<char*>(buf) + bk.begin * dtype_size(dtype), bk.end - bk.begin, dtype};
    comm_.allgather_in_place(all);
    bytes += all.bytes();
  }
  last_.gathered_bytes = bytes;
  if (clock_) return;  // enqueued only: a device communicator's time is not the host's
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  last_.comm_seconds += s;
  last_.exposed_seconds += s;
}

// Launched all-gathers write the caller's buffer: they are waited for (a bounded poll, so that an
// error path, whose peers may never join, ends anyway: the job is being aborted then).
GradReducer::~GradReducer() {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (auto& g : gathers_) {
    try {
      while (g && !g->test() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (g && g->test()) g->wait();  // a device request orders the stream; rethrows a failure
    } catch (...) {  // an error path already under way reports the collective's failure
    }
  }
}

void GradReducer::launch_gathers(void* buf, DType dtype) {
  AMP_CHECK(shards_, "launch_gathers without a shard layout");
  if (!active()) return;
  settle_gathers();
  gathers_.resize(buckets_.size());
  size_t bytes = 0;
  for (size_t b = buckets_.size(); b-- > 0;) {
    const Bucket& bk = buckets_[b];
    const BufView all{static_cast<char*>(buf) + bk.begin * dtype_size(dtype), bk.end - bk.begin, dtype};
    gathers_[b] = comm_.iallgather_in_place(all);
    ++gathers_pending_;
    bytes += all.bytes();
  }
  last_.gathered_bytes = bytes;
}

// Waits for bucket b's all-gather if it is still pending; true when it was.
bool GradReducer::complete_gather(size_t b) {
  if (!gathers_[b]) return false;
  gathers_[b]->wait();
  gather_seconds_ += gathers_[b]->seconds();
  gathers_[b].reset();
  --gathers_pending_;
  return true;
}

void GradReducer::wait_gathered(int first_tensor, int last_tensor) {
  if (gathers_pending_ == 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  for (int t = first_tensor; t <= last_tensor; ++t)
    for (size_t b : of_tensor_[size_t(t)]) last_.gathers_awaited_by_forward += complete_gather(b);
  gather_waited_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void GradReducer::settle_gathers() {
  if (gathers_pending_ == 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t b = gathers_.size(); b-- > 0;) last_.gathers_settled += complete_gather(b);  // in issue order
  gather_waited_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void GradReducer::begin_step() {
  for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].last_tensor - buckets_[b].first_tensor + 1;
  requests_.clear();
  launched_ = 0;
  released_ = 0;
  step_bytes_ = 0;
  blocking_seconds_ = 0;
  if (clock_ && active()) clock_->clock_begin_step();
}

const ReducerStats& GradReducer::last_step() {
  double comm = 0, exposed = 0;
  if (clock_ && clock_->clock_poll(&comm, &exposed)) {
    last_.comm_seconds = comm;
    last_.exposed_seconds = exposed;
    ++last_.measured;
  }
  return last_;
}

void GradReducer::tensor_ready(int tensor) {
  if (!active()) return;
  for (size_t b : of_tensor_[size_t(tensor)]) --pending_[b];
  if (!overlap_) {
    if (!release_) return;  // reduced in finish()
    // Stage 2 without overlap: reduce (blocking) and return each bucket as soon as it is complete.
    while (launched_ < buckets_.size() && pending_[launched_] == 0) {
      reduce_blocking(launched_++);
      release_done(true);
    }
    return;
  }
  // Buckets are launched in bucket order whatever order they complete in (a layer larger than a
  // bucket completes several at once, and a bucket can wait for a small tensor, such as a bias,
  // that backward finishes after the weight before it): every rank then issues the same
  // collectives in the same order.
  while (launched_ < buckets_.size() && pending_[launched_] == 0) launch(launched_);
  if (!release_) return;
  release_done(false);
  // Stage 2 bounds the buckets in flight: backward waits for the oldest beyond kStage2InFlight.
  if (launched_ - released_ > kStage2InFlight) {
    const auto t0 = std::chrono::steady_clock::now();
    while (launched_ - released_ > kStage2InFlight) {
      requests_[released_]->wait();
      release_done(false);
    }
    blocking_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
}

void GradReducer::launch(size_t b) {
  AMP_CHECK(b == launched_, "bucket ", b, " launched out of order (next is ", launched_, ")");
  const Bucket& bk = buckets_[b];
  if (before_reduce_) before_reduce_(bk.begin, bk.end);
  const BufView view = bucket_view(b);
  requests_.push_back(shards_ ? comm_.ireduce_scatter(view.data, shard_view(b), ReduceOp::Sum)
                              : comm_.iallreduce(view, ReduceOp::Sum));
  step_bytes_ += view.bytes();
  ++launched_;
}

void GradReducer::reduce_blocking(size_t b) {
  const auto t0 = std::chrono::steady_clock::now();
  const Bucket& bk = buckets_[b];
  if (before_reduce_) before_reduce_(bk.begin, bk.end);
  const BufView view = bucket_view(b);
  if (shards_) comm_.reduce_scatter(view.data, shard_view(b), ReduceOp::Sum);
  else comm_.allreduce(view, ReduceOp::Sum);
  step_bytes_ += view.bytes();
  blocking_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void GradReducer::finish() {
  if (!active()) return;
  if (clock_) clock_->clock_wait_begins();
  const auto t0 = std::chrono::steady_clock::now();
  double comm_seconds = 0;
  if (!overlap_) {
    // Blocking, in bucket order, on this thread; the time is all exposed (stage 2: reduced already,
    // bucket by bucket during backward).
    if (release_) {
      AMP_CHECK(launched_ == buckets_.size(), "backward finished with ", buckets_.size() - launched_,
                " gradient buckets never ready");
    } else {
      for (size_t b = 0; b < buckets_.size(); ++b) reduce_blocking(b);
    }
  } else {
    AMP_CHECK(launched_ == buckets_.size(), "backward finished with ", buckets_.size() - launched_,
              " gradient buckets never ready");
    for (auto& r : requests_) r->wait();
    for (auto& r : requests_) comm_seconds += r->seconds();
    release_done(true);
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  last_.bytes = step_bytes_;
  if (clock_) {  // the device's times arrive later, through last_step()
    clock_->clock_wait_ends();
    gather_waited_ = gather_seconds_ = 0;  // host waits on enqueued work: not the device's times
    return;
  }
  // Without overlap the blocking reductions are the time, all of it exposed (stage 2 ran them
  // during backward).
  last_.exposed_seconds = (overlap_ ? waited + blocking_seconds_ : blocking_seconds_) + gather_waited_;
  last_.comm_seconds = (overlap_ ? comm_seconds : blocking_seconds_) + gather_seconds_;
  gather_waited_ = gather_seconds_ = 0;
  ++last_.measured;
}

}  // namespace amp
