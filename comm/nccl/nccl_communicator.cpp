#include "comm/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <vector>

#include "comm/nccl/nccl_check.h"
#include "core/error.h"
#include "comm/device_stream.h"
#include "cudart/device_buffer.h"
#include "cudart/host_wait.h"

namespace amp {

namespace {

using cuda::DeviceBuffer;
using cuda::Event;
using cuda::Stream;

// Eager steps whose times were never read (nobody polls, or the host runs far ahead): the oldest
// are dropped beyond this many.
constexpr size_t kMaxUnreadSteps = 64;

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
    case DType::I32: return ncclInt32;
    case DType::U8: return ncclUint8;
  }
  throw Error(ErrorKind::Internal, "nccl: unknown dtype");
}

ncclRedOp_t nccl_op(ReduceOp op, DType t) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Avg:
      AMP_CHECK(t == DType::F32 || is_float16(t), "average of integers is not defined");
      return ncclAvg;
  }
  throw Error(ErrorKind::Internal, "nccl: unknown reduction");
}

bool is_capturing(cudaStream_t s) {
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

}  // namespace

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

NcclCommunicator::NcclCommunicator(Communicator& world, DeviceStream& stream, int device)
    : impl_(std::make_unique<Impl>(world)) {
  AMP_CHECK(stream.stream_handle() != nullptr, "the NCCL communicator needs the CUDA backend's stream");
  Impl& m = *impl_;
  m.owner = &stream;
  m.compute = static_cast<cudaStream_t>(stream.stream_handle());
  m.shared->compute = m.compute;
  m.shared->owner = &stream;
  m.shared->rank = world.rank();
  if (device < 0) AMP_CUDA_CHECK(cudaGetDevice(&device));
  m.device = device;
  AMP_CUDA_CHECK(cudaSetDevice(device));

  // Rank 0 makes the id and sends it with its status, so a failure there cannot leave the other
  // ranks waiting in the broadcast.
  struct Bootstrap {
    int32_t ok;
    char error[252];
    ncclUniqueId id;
  } boot{};
  if (world.rank() == 0) {
    const ncclResult_t r = ncclGetUniqueId(&boot.id);
    boot.ok = r == ncclSuccess;
    if (!boot.ok) std::snprintf(boot.error, sizeof boot.error, "%s", nccl::nccl_error_string(r).c_str());
  }
  world.broadcast(BufView{&boot, sizeof boot, DType::U8}, 0);
  if (!boot.ok) throw Error(ErrorKind::Comm, strcat("ncclGetUniqueId failed on rank 0: ", boot.error));

  int least = 0, greatest = 0;
  AMP_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  m.comm_stream = Stream(greatest);  // collectives first when both streams have work ready
  m.barrier_word = DeviceBuffer<int32_t>(1);
  AMP_CUDA_CHECK(cudaMemsetAsync(m.barrier_word.get(), 0, sizeof(int32_t), m.comm_stream.get()));
  AMP_NCCL_CHECK(ncclCommInitRank(&m.shared->comm, world.size(), boot.id, world.rank()));
  // The backend's host waits on the compute stream (which waits for our collectives) notice NCCL
  // errors instead of blocking forever.
  std::shared_ptr<Shared> s = m.shared;
  m.owner->set_wait_check([s] { s->check(); });
}

NcclCommunicator::~NcclCommunicator() {
  Impl& m = *impl_;
  m.owner->set_wait_check(nullptr);
  Shared& s = *m.shared;
  if (!s.comm) {  // aborted after an error: only a graph captured since could remain
    s.drop_graph();
    return;
  }
  if (std::uncaught_exceptions() > 0) {
    // Error path: peers may never join another collective; do not wait for them.
    s.abort_comm();
    return;
  }
  s.drop_graph();
  try {
    m.wait_comm_stream();  // aborts and throws on an NCCL error instead of hanging
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warning: %s\n", e.what());
    return;
  }
  const ncclResult_t r = ncclCommDestroy(s.comm);
  s.comm = nullptr;
  if (r != ncclSuccess) std::fprintf(stderr, "warning: ncclCommDestroy failed: %s\n", ncclGetErrorString(r));
}

int NcclCommunicator::rank() const { return impl_->world.rank(); }
int NcclCommunicator::size() const { return impl_->world.size(); }
int NcclCommunicator::local_rank() const { return impl_->world.local_rank(); }
int NcclCommunicator::local_size() const { return impl_->world.local_size(); }

void NcclCommunicator::check_async_errors() { impl_->shared->check(); }

std::unique_ptr<Request> NcclCommunicator::iallreduce(BufView buf, ReduceOp op) {
  const ncclDataType_t type = nccl_type(buf.dtype);
  const ncclRedOp_t rop = nccl_op(op, buf.dtype);
  return impl_->timed(buf.count, [&](ncclComm_t comm, cudaStream_t s) {
    return ncclAllReduce(buf.data, buf.data, buf.count, type, rop, comm, s);
  });
}

std::unique_ptr<Request> NcclCommunicator::ireduce_scatter(const void* send, BufView recv, ReduceOp op) {
  const ncclDataType_t type = nccl_type(recv.dtype);
  const ncclRedOp_t rop = nccl_op(op, recv.dtype);
  return impl_->timed(recv.count, [&](ncclComm_t comm, cudaStream_t s) {
    return ncclReduceScatter(send, recv.data, recv.count, type, rop, comm, s);
  });
}

void NcclCommunicator::reduce_scatter(const void* send, BufView recv, ReduceOp op) {
  ireduce_scatter(send, recv, op)->wait();
}

void NcclCommunicator::allgather_in_place(BufView all) {
  Impl& m = *impl_;
  ncclComm_t comm = m.comm();
  const size_t world = size_t(size());
  AMP_CHECK(all.count % world == 0, "all-gather of ", all.count, " elements over ", world, " ranks");
  if (all.count == 0) return;
  const size_t block = all.bytes() / world;
  char* base = static_cast<char*>(all.data);
  m.note_capture();
  m.order_after_compute();
  // In place: this rank's block is already where the gathered buffer wants it (NCCL's rule).
  AMP_NCCL_CHECK(ncclAllGather(base + size_t(rank()) * block, base, block, ncclUint8, comm, m.comm_stream.get()));
  m.join_compute();
}

void NcclCommunicator::allreduce(BufView buf, ReduceOp op) { iallreduce(buf, op)->wait(); }

void NcclCommunicator::broadcast(BufView buf, int root) {
  Impl& m = *impl_;
  ncclComm_t comm = m.comm();
  if (buf.count == 0) return;
  m.note_capture();
  m.order_after_compute();
  AMP_NCCL_CHECK(ncclBroadcast(buf.data, buf.data, buf.count, nccl_type(buf.dtype), root, comm, m.comm_stream.get()));
  m.join_compute();
}

void NcclCommunicator::allgather(const void* send, void* recv, size_t bytes) {
  Impl& m = *impl_;
  ncclComm_t comm = m.comm();
  if (bytes == 0) return;
  m.note_capture();
  m.order_after_compute();
  AMP_NCCL_CHECK(ncclAllGather(send, recv, bytes, ncclUint8, comm, m.comm_stream.get()));
  m.join_compute();
}

void NcclCommunicator::barrier() {
  Impl& m = *impl_;
  ncclComm_t comm = m.comm();
  AMP_CHECK(!is_capturing(m.compute), "barrier() blocks the host: not allowed while a CUDA graph is captured");
  m.order_after_compute();
  AMP_NCCL_CHECK(ncclAllReduce(m.barrier_word.get(), m.barrier_word.get(), 1, ncclInt32, ncclSum, comm,
                           m.comm_stream.get()));
  m.wait_comm_stream();
}

void NcclCommunicator::abort(int exit_code) {
  impl_->shared->abort_comm();
  impl_->world.abort(exit_code);
  std::_Exit(exit_code);  // the world's abort does not return (a virtual call the compiler cannot see through)
}

// ---- step clock ---------------------------------------------------------------------------------

void NcclCommunicator::clock_begin_step() {
  Impl& m = *impl_;
  // A step begun and never waited for (an exception in between) is dropped; destroying its events
  // is safe while their records are pending (CUDA frees them once the records complete).
  if (!m.eager_steps.empty() && !m.eager_steps.back()->closed) m.eager_steps.pop_back();
  m.open_step = nullptr;
  if (is_capturing(m.compute)) {
    // A new capture: the graph of an older one is gone (the backend drops it before capturing),
    // so nothing records that step's events any more.
    m.graph_step = std::make_unique<TimedStep>();
    m.graph_step->in_graph = true;
    m.graph_step->graph = m.owner->graph_id();
    m.shared->captured = true;
    m.open_step = m.graph_step.get();
    return;
  }
  if (m.eager_steps.size() >= kMaxUnreadSteps) m.eager_steps.pop_front();
  std::unique_ptr<TimedStep> t;
  if (!m.spare_steps.empty()) {
    t = std::move(m.spare_steps.back());  // its events were read: their records have completed
    m.spare_steps.pop_back();
  } else {
    t = std::make_unique<TimedStep>();
  }
  t->n = 0;
  t->closed = false;
  m.eager_steps.push_back(std::move(t));
  m.open_step = m.eager_steps.back().get();
}

void NcclCommunicator::clock_wait_begins() {
  Impl& m = *impl_;
  if (m.open_step) m.open_step->mark(m.open_step->wait_begin, m.compute);
}

void NcclCommunicator::clock_wait_ends() {
  Impl& m = *impl_;
  if (!m.open_step) return;
  m.open_step->mark(m.open_step->wait_end, m.compute);
  m.open_step->closed = true;
  m.open_step = nullptr;
}

bool NcclCommunicator::clock_poll(double* comm_seconds, double* exposed_seconds) {
  Impl& m = *impl_;
  if (is_capturing(m.compute)) return false;  // no event queries while a capture is open
  bool got = false;
  // Eager steps complete in issue order: read until the first that has not.
  while (!m.eager_steps.empty() && m.eager_steps.front()->closed) {
    TimedStep& t = *m.eager_steps.front();
    const cudaError_t q = cudaEventQuery(t.wait_end.get());
    if (q == cudaErrorNotReady) {
      cudaGetLastError();
      break;
    }
    if (q == cudaSuccess) got = t.read(comm_seconds, exposed_seconds) || got;
    else cudaGetLastError();  // a device fault surfaces at the next checked call; statistics just skip it
    m.spare_steps.push_back(std::move(m.eager_steps.front()));
    m.eager_steps.pop_front();
  }
  // The captured step: its events hold the latest launch of the graph once that has completed. A
  // launch still running when the next one is enqueued is never seen (the next one records the
  // same events again).
  if (m.graph_step && m.graph_step->closed) {
    TimedStep& t = *m.graph_step;
    const uint64_t graph = m.owner->graph_id(), launches = m.owner->graph_launches();
    if (graph == t.graph && launches > t.launches_read) {
      const cudaError_t q = cudaEventQuery(t.wait_end.get());
      if (q == cudaErrorNotReady) {
        cudaGetLastError();
      } else {
        if (q == cudaSuccess) got = t.read(comm_seconds, exposed_seconds) || got;
        else cudaGetLastError();
        t.launches_read = launches;
      }
    }
  }
  return got;
}

}  // namespace amp
