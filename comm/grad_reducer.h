// Bucketed gradient all-reduce overlapped with backward. The flat gradient buffer is cut into
// contiguous buckets from its end (the last layer's gradients are ready first): a small first
// bucket, then buckets of bucket_bytes; a bucket may split a tensor. When backward has completed
// every tensor a bucket overlaps, the caller's pre-reduction hook sees the bucket's range (the
// trainer checks it for non-finite values into this rank's flag slot) and its non-blocking sum
// starts, while backward goes on with earlier layers. The reducer only moves bytes.
// With sharded optimizer state (comm/shard_layout.h) each bucket is reduce-scattered instead, and
// after the update the reducer all-gathers the updated working weights bucket by bucket.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor_span.h"

namespace amp {

class ShardLayout;  // comm/shard_layout.h

struct Bucket {
  size_t begin = 0, end = 0;      // element range in the flat gradient buffer
  int first_tensor = 0, last_tensor = 0;  // tensors overlapping the range (inclusive; none if first > last)
};

// One step's communication, for summary.json.
// Where the waits block the host (MPI), finish() measures the step it ends. Where they do not
// (NCCL: the compute stream waits, the host goes on), the times come from events recorded with the
// step's collectives, into the CUDA graph too, and read later without blocking: last_step() then
// holds the latest step whose events had completed when it was called, usually an earlier step
// than the one just finished. A replayed step re-records the captured step's events, so its times
// can be read only until the next replay is launched: call last_step() before enqueueing the next
// step's work; a replay still running then is not measured (the host ran ahead of the device).
struct ReducerStats {
  double comm_seconds = 0;     // time the collectives took, summed (measured where they run)
  double exposed_seconds = 0;  // time the caller's work stood still waiting for them after backward
                               // (and, sharded on the host, for the weights' all-gather)
  size_t bytes = 0;            // gradient bytes all-reduced (or reduce-scattered) per step
  size_t gathered_bytes = 0;   // sharded: weight bytes all-gathered per step
  // Overlapped all-gathers so far (launch_gathers): buckets the forward pass waited for
  // (wait_gathered), and buckets settled before that by another reader of the weights.
  int64_t gathers_awaited_by_forward = 0, gathers_settled = 0;
  int64_t measured = 0;        // steps measured so far: the times above are new when this changed
};

// Device-side timing of a step's collectives, implemented by communicators whose waits do not
// block the host (NcclCommunicator). Timing marks are events: outside a capture a fresh set per
// step; while a CUDA graph is captured, one set recorded into the graph that every replay records
// again.
class StepClock {
 public:
  virtual ~StepClock() = default;
  // The collectives issued from here to clock_wait_ends() are one step's.
  virtual void clock_begin_step() = 0;
  virtual void clock_wait_begins() = 0;  // the caller's stream is about to wait for them
  virtual void clock_wait_ends() = 0;    // ...and has waited for all of them
  // The latest step whose marks have all completed since the previous call; never blocks. False
  // when none has.
  virtual bool clock_poll(double* comm_seconds, double* exposed_seconds) = 0;
};

class GradReducer {
 public:
  // Runs just before a bucket's elements [begin, end) are summed (enqueued work, in bucket order).
  using BeforeReduce = std::function<void(size_t begin, size_t end)>;
  // grads: flat buffer of `dtype` in the communicator's memory.
  GradReducer(Communicator& comm, std::vector<TensorSpan> spans, size_t total, DType dtype, void* grads,
              size_t first_bucket_bytes, size_t bucket_bytes, BeforeReduce before_reduce);
  ~GradReducer();  // waits (bounded) for launched all-gathers: they write the caller's buffer

  // overlap = false: buckets are reduced one after the other, blocking, in finish() (no
  // communication thread competing with backward for the cores).
  void set_overlap(bool overlap) { overlap_ = overlap; }
  // Sharded optimizer state: the buckets become the layout's (grads then holds layout.padded()
  // elements) and each is reduce-scattered, this rank's block into shard_grads (the layout's
  // shard_size() elements of the same type) at the block's place in the shard.
  void shard(const ShardLayout& layout, void* shard_grads);
  // Stage 2 (sharded only): once a bucket's reduce-scatter is done, the whole pages (of
  // `granularity` bytes) of its range of the gradient buffer go to `release` (the backend returns
  // their memory; backward commits them again before it writes them), so a rank holds its reduced
  // shard and the buckets in flight instead of the whole buffer. Buckets complete in issue order; a
  // page shared with the next bucket goes with that one. Without overlap each bucket is then reduced,
  // blocking, as soon as backward completes it (not all at the end), so that it can be returned.
  // With overlap at most kStage2InFlight buckets are in flight: backward waits for the oldest
  // beyond them (exposed time).
  using Release = std::function<void(void* p, size_t bytes)>;
  static constexpr size_t kStage2InFlight = 2;
  void release_reduced(Release release, size_t granularity);
  // Sharded, after the update: the blocks of every bucket of buf (layout.padded() elements of
  // dtype, this rank's blocks updated) all-gathered in place, in bucket order.
  void gather_shards(void* buf, DType dtype);
  // The same, non-blocking, overlapped with what follows (the next step's forward): the buckets'
  // all-gathers are issued from the last bucket to the first (the buffer's start first, where the
  // forward pass begins); wait_gathered(first, last) waits for the buckets that hold tensors
  // [first, last] (the model calls it before a layer reads its weights), settle_gathers() for all
  // of them (before anything else reads or writes buf). Each bucket's bytes are the blocking
  // form's: the same bits. The waits' time is counted as exposed in the next finish().
  void launch_gathers(void* buf, DType dtype);
  void wait_gathered(int first_tensor, int last_tensor);
  void settle_gathers();
  bool overlap() const { return overlap_; }

  void begin_step();
  void tensor_ready(int tensor);  // backward finished this tensor's gradient
  void finish();                  // waits for every bucket; afterwards grads hold the sum

  const std::vector<Bucket>& buckets() const { return buckets_; }
  // The latest complete measurement (see ReducerStats); polls a device communicator's events.
  const ReducerStats& last_step();
  bool active() const { return comm_.size() > 1; }

 private:
  void launch(size_t b);

  void reduce_blocking(size_t b);
  void release_done(bool wait);  // stage 2: return the reduced buckets (all of them with wait)
  bool complete_gather(size_t b);
  void rebuild_index();
  BufView bucket_view(size_t b) const;
  BufView shard_view(size_t b) const;  // this rank's block of bucket b in shard_grads_

  Communicator& comm_;
  std::vector<TensorSpan> spans_;
  DType dtype_;
  void* grads_;
  BeforeReduce before_reduce_;
  std::vector<Bucket> buckets_;
  std::vector<int> pending_;                 // per bucket: tensors not yet ready
  std::vector<std::vector<size_t>> of_tensor_;  // tensor -> buckets it overlaps
  std::vector<std::unique_ptr<Request>> requests_;
  size_t launched_ = 0;
  bool overlap_ = true;
  StepClock* clock_ = nullptr;  // the communicator's, when it times on the device
  const ShardLayout* shards_ = nullptr;
  void* shard_grads_ = nullptr;
  size_t step_bytes_ = 0;
  Release release_;
  size_t granularity_ = 0;
  double blocking_seconds_ = 0;  // this step's blocking reductions (stage 2: and waits in backward)
  std::vector<std::unique_ptr<Request>> gathers_;  // per bucket: the launched all-gather (null: done)
  size_t gathers_pending_ = 0;
  double gather_waited_ = 0, gather_seconds_ = 0;  // since the last finish(): waits, and the gathers' own time
  size_t released_ = 0;  // stage 2: buckets returned this step (in bucket order)
  ReducerStats last_;
};

// The bucket layout alone (tests and benchmarks use it too). keep_empty: ranges of padding only
// are buckets too (first_tensor > last_tensor), so that the buckets cover [0, total).
std::vector<Bucket> make_buckets(const std::vector<TensorSpan>& spans, size_t total, size_t elem_bytes,
                                 size_t first_bucket_bytes, size_t bucket_bytes, bool keep_empty = false);

}  // namespace amp
