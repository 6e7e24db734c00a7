// The NCCL communicator's internals, shared by its collectives (nccl_communicator.cpp) and its
// step clock (nccl_step_clock.cpp): the state that requests and the backend's wait check share
// with it (Shared), requests, one step's timing marks (TimedStep) and NcclCommunicator::Impl.
// Included by those two files only.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "comm/device_stream.h"
#include "comm/nccl/nccl_check.h"
#include "comm/nccl/nccl_communicator.h"
#include "core/error.h"
#include "cudart/device_buffer.h"
#include "cudart/host_wait.h"

namespace amp {

namespace nccl_detail {

using cuda::DeviceBuffer;
using cuda::Event;
using cuda::Stream;

// Eager steps whose times were never read (nobody polls, or the host runs far ahead): the oldest
// are dropped beyond this many.
constexpr size_t kMaxUnreadSteps = 64;

inline ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
    case DType::I32: return ncclInt32;
    case DType::U8: return ncclUint8;
  }
  throw Error(ErrorKind::Internal, "nccl: unknown dtype");
}

inline ncclRedOp_t nccl_op(ReduceOp op, DType t) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Avg:
      AMP_CHECK(t == DType::F32 || is_float16(t), "average of integers is not defined");
      return ncclAvg;
  }
  throw Error(ErrorKind::Internal, "nccl: unknown reduction");
}

inline bool is_capturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  AMP_CUDA_CHECK(cudaStreamIsCapturing(s, &st));
  return st != cudaStreamCaptureStatusNone;
}

// What the communicator and its requests share: the NCCL handle (null once destroyed or aborted),
// the error that aborted it, and recycled ordering events (creating one per collective would cost
// a driver call each). Requests and the backend's wait check may outlive the communicator object.
struct Shared {
  ncclComm_t comm = nullptr;
  cudaStream_t compute = nullptr;
  int rank = 0;
  DeviceStream* owner = nullptr;  // of the compute stream and its captured graph (outlives this)
  bool captured = false;  // something was recorded into a CUDA graph (see abort_comm)
  std::string failure;    // why the communicator was aborted
  std::vector<Event> spare_events;

  Event take_event() {
    if (spare_events.empty()) return Event(false);
    Event e = std::move(spare_events.back());
    spare_events.pop_back();
    return e;
  }
  void give_event(Event&& e) {
    if (e.get()) spare_events.push_back(std::move(e));
  }

  // ncclCommDestroy and ncclCommAbort both wait until every CUDA graph that captured this
  // communicator's collectives is gone: the stream's owner drops its graph first (a launch in
  // flight keeps it alive until it ends, which the abort makes happen). The trainer's step drops
  // it before the communicator goes on the normal path; this covers an abort in the middle.
  void drop_graph() noexcept {
    if (captured && owner) owner->release_capture();
    captured = false;
  }
  void abort_comm() noexcept {
    if (!comm) return;
    drop_graph();
    ncclCommAbort(comm);
    comm = nullptr;
  }

  void require_live() const {
    if (!comm)
      throw Error(ErrorKind::Comm, failure.empty() ? strcat("communication error: the NCCL communicator of rank ", rank,
                                                            " is no longer usable (destroyed or aborted)")
                                                   : failure);
  }

  // Raises the collectives' asynchronous error, after aborting the communicator (its kernels stop
  // instead of spinning on peers that will never answer). ncclInProgress is no error.
  void check() {
    require_live();
    ncclResult_t async = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &async);
    const ncclResult_t bad = r != ncclSuccess ? r : async;
    if (bad == ncclSuccess || bad == ncclInProgress) return;
    const char* last = ncclGetLastError(comm);
    failure = strcat("communication error: NCCL error on rank ", rank, ": ", ncclGetErrorString(bad), " (",
                     last && *last ? last : "NCCL gave no detail",
                     "); the NCCL communicator was aborted (a rank failed, or the network between the ranks did)");
    abort_comm();
    throw Error(ErrorKind::Comm, failure);
  }
};

class NcclRequest final : public Request {
 public:
  NcclRequest(std::shared_ptr<Shared> shared, Event done) : shared_(std::move(shared)), done_(std::move(done)) {}
  ~NcclRequest() override { shared_->give_event(std::move(done_)); }

  // The compute stream waits for the collective; the host does not.
  void wait() override {
    if (!done_.get() || waited_) return;
    shared_->require_live();
    AMP_CUDA_CHECK(cudaStreamWaitEvent(shared_->compute, done_.get(), 0));
    waited_ = true;
    shared_->check();
  }
  bool test() override {
    if (!done_.get()) return true;
    if (is_capturing(shared_->compute)) return false;  // recorded into a graph: nothing has run yet
    const cudaError_t q = cudaEventQuery(done_.get());
    if (q == cudaErrorNotReady) {
      cudaGetLastError();  // no error: leave nothing for a later launch check
      shared_->check();
      return false;
    }
    AMP_CUDA_CHECK(q);
    return true;
  }

 private:
  std::shared_ptr<Shared> shared_;
  Event done_;
  bool waited_ = false;
};

// One step's timing marks (StepClock). Timing events: created with timing, recorded with the
// external flag while a capture is open, so that they become event-record nodes of the graph that
// every launch records again (a plain record during a capture only orders streams).
struct TimedStep {
  Event wait_begin, wait_end;   // on the compute stream
  std::vector<Event> starts, ends;  // on the communication stream, around each collective
  size_t n = 0;                 // collectives recorded
  bool closed = false;          // wait_end recorded
  bool in_graph = false;
  uint64_t graph = 0;           // the graph's id (DeviceStream::graph_id)
  uint64_t launches_read = 0;   // launches of it already read

  void mark(Event& e, cudaStream_t s) {
    if (!e.get()) e = Event(true);
    AMP_CUDA_CHECK(cudaEventRecordWithFlags(e.get(), s, in_graph ? cudaEventRecordExternal : cudaEventRecordDefault));
  }
  // The step's times once wait_end has completed; false if an event cannot be read.
  bool read(double* comm_seconds, double* exposed_seconds) const {
    if (!wait_begin.get() || !wait_end.get()) return false;
    double comm = 0;
    float ms = 0;
    for (size_t i = 0; i < n; ++i) {
      if (cudaEventElapsedTime(&ms, starts[i].get(), ends[i].get()) != cudaSuccess) {
        cudaGetLastError();
        return false;
      }
      comm += ms;
    }
    if (cudaEventElapsedTime(&ms, wait_begin.get(), wait_end.get()) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    *comm_seconds = comm * 1e-3;
    *exposed_seconds = std::max(0.0f, ms) * 1e-3;
    return true;
  }
};

}  // namespace nccl_detail

using namespace nccl_detail;

struct NcclCommunicator::Impl {
  Communicator& world;
  std::shared_ptr<Shared> shared = std::make_shared<Shared>();
  cudaStream_t compute = nullptr;
  int device = 0;
  DeviceStream* owner = nullptr;
  Stream comm_stream;
  DeviceBuffer<int32_t> barrier_word;

  // Step clock. Eager steps get events of their own and are read in issue order; the step
  // recorded into the graph keeps its events for as long as the graph may launch them.
  std::deque<std::unique_ptr<TimedStep>> eager_steps;
  std::vector<std::unique_ptr<TimedStep>> spare_steps;
  std::unique_ptr<TimedStep> graph_step;
  TimedStep* open_step = nullptr;  // between clock_begin_step() and clock_wait_ends()

  explicit Impl(Communicator& w) : world(w) {}

  ncclComm_t comm() const {
    shared->require_live();
    return shared->comm;
  }
  void note_capture() {
    if (is_capturing(compute)) shared->captured = true;
  }
  // Makes the communication stream wait for everything enqueued on the compute stream so far.
  void order_after_compute() {
    Event ready = shared->take_event();
    AMP_CUDA_CHECK(cudaEventRecord(ready.get(), compute));
    AMP_CUDA_CHECK(cudaStreamWaitEvent(comm_stream.get(), ready.get(), 0));
    shared->give_event(std::move(ready));  // the wait above already holds this record
  }
  // Makes the compute stream wait for everything enqueued on the communication stream so far.
  void join_compute() {
    Event done = shared->take_event();
    AMP_CUDA_CHECK(cudaEventRecord(done.get(), comm_stream.get()));
    AMP_CUDA_CHECK(cudaStreamWaitEvent(compute, done.get(), 0));
    shared->give_event(std::move(done));
  }
  // Enqueues one collective (issue(comm, stream) returns NCCL's result) on the communication
  // stream after the compute stream's work so far, inside the open step's timing marks; the
  // request's wait makes the compute stream wait for it.
  template <typename Issue>
  std::unique_ptr<Request> timed(size_t count, Issue issue) {
    ncclComm_t c = comm();
    if (count == 0) return std::make_unique<NcclRequest>(shared, Event());
    note_capture();
    order_after_compute();
    TimedStep* t = open_step;
    if (t && t->starts.size() <= t->n) {
      t->starts.emplace_back();
      t->ends.emplace_back();
    }
    if (t) t->mark(t->starts[t->n], comm_stream.get());
    AMP_NCCL_CHECK(issue(c, comm_stream.get()));
    if (t) t->mark(t->ends[t->n++], comm_stream.get());
    Event done = shared->take_event();
    AMP_CUDA_CHECK(cudaEventRecord(done.get(), comm_stream.get()));
    return std::make_unique<NcclRequest>(shared, std::move(done));
  }
  // Host wait for the communication stream that notices NCCL errors.
  void wait_comm_stream() {
    std::shared_ptr<Shared> s = shared;
    cuda::wait_stream(comm_stream.get(), [s] { s->check(); });
  }
};

}  // namespace amp
