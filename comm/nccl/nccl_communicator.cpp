#include "comm/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include "comm/nccl/nccl_check.h"
#include "core/error.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_buffer.h"

namespace amp {

namespace {

using cuda::DeviceBuffer;
using cuda::Event;
using cuda::Stream;

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
  CUDA_CHECK(cudaStreamIsCapturing(s, &st));
  return st != cudaStreamCaptureStatusNone;
}

// Recycled events (creating one per collective would cost a driver call each). Shared with the
// requests, which give their events back when they go.
class EventPool {
 public:
  Event take(bool timing) {
    auto& v = timing ? timing_ : ordering_;
    if (v.empty()) return Event(timing);
    Event e = std::move(v.back());
    v.pop_back();
    return e;
  }
  void give(Event&& e, bool timing) {
    if (e.get()) (timing ? timing_ : ordering_).push_back(std::move(e));
  }

 private:
  std::vector<Event> ordering_, timing_;
};

class NcclRequest final : public Request {
 public:
  NcclRequest(std::shared_ptr<EventPool> pool, ncclComm_t comm, cudaStream_t compute, Event done, Event t0, Event t1)
      : pool_(std::move(pool)), comm_(comm), compute_(compute), done_(std::move(done)), t0_(std::move(t0)),
        t1_(std::move(t1)) {}
  ~NcclRequest() override {
    pool_->give(std::move(done_), false);
    pool_->give(std::move(t0_), true);
    pool_->give(std::move(t1_), true);
  }

  // The compute stream waits for the collective; the host does not.
  void wait() override {
    if (!done_.get() || waited_) return;
    CUDA_CHECK(cudaStreamWaitEvent(compute_, done_.get(), 0));
    waited_ = true;
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
    if (async != ncclSuccess)
      throw Error(ErrorKind::Comm, strcat("NCCL all-reduce failed: ", nccl::nccl_error_string(async)));
  }
  bool test() override {
    if (!done_.get()) return true;
    if (is_capturing(compute_)) return false;  // recorded into a graph: nothing has run yet
    const cudaError_t q = cudaEventQuery(done_.get());
    if (q == cudaErrorNotReady) return false;
    CUDA_CHECK(q);
    return true;
  }
  // Measured by events around the collective when it was issued outside a capture and has finished.
  double seconds() const override {
    if (!t0_.get() || !t1_.get() || cudaEventQuery(t1_.get()) != cudaSuccess) {
      cudaGetLastError();
      return 0.0;
    }
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, t0_.get(), t1_.get()) != cudaSuccess) {
      cudaGetLastError();
      return 0.0;
    }
    return double(ms) * 1e-3;
  }

 private:
  std::shared_ptr<EventPool> pool_;
  ncclComm_t comm_;
  cudaStream_t compute_;
  Event done_, t0_, t1_;
  bool waited_ = false;
};

}  // namespace

struct NcclCommunicator::Impl {
  MpiCommunicator& world;
  cudaStream_t compute = nullptr;
  int device = 0;
  Stream comm_stream;
  ncclComm_t comm = nullptr;
  std::shared_ptr<EventPool> events = std::make_shared<EventPool>();
  DeviceBuffer<int32_t> barrier_word;
  bool captured = false;  // a collective was recorded into a CUDA graph (see the destructor)

  explicit Impl(MpiCommunicator& w) : world(w) {}

  // Makes the communication stream wait for everything enqueued on the compute stream so far.
  void order_after_compute() {
    Event ready = events->take(false);
    CUDA_CHECK(cudaEventRecord(ready.get(), compute));
    CUDA_CHECK(cudaStreamWaitEvent(comm_stream.get(), ready.get(), 0));
    events->give(std::move(ready), false);  // the wait above already holds this record
  }
  // Makes the compute stream wait for everything enqueued on the communication stream so far.
  void join_compute() {
    Event done = events->take(false);
    CUDA_CHECK(cudaEventRecord(done.get(), comm_stream.get()));
    CUDA_CHECK(cudaStreamWaitEvent(compute, done.get(), 0));
    events->give(std::move(done), false);
  }
};

NcclCommunicator::NcclCommunicator(MpiCommunicator& world, void* compute_stream, int device)
    : impl_(std::make_unique<Impl>(world)) {
  AMP_CHECK(compute_stream != nullptr, "the NCCL communicator needs the CUDA backend's stream");
  Impl& m = *impl_;
  m.compute = static_cast<cudaStream_t>(compute_stream);
  if (device < 0) CUDA_CHECK(cudaGetDevice(&device));
  m.device = device;
  CUDA_CHECK(cudaSetDevice(device));

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
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  m.comm_stream = Stream(greatest);  // collectives first when both streams have work ready
  m.barrier_word = DeviceBuffer<int32_t>(1);
  CUDA_CHECK(cudaMemsetAsync(m.barrier_word.get(), 0, sizeof(int32_t), m.comm_stream.get()));
  NCCL_CHECK(ncclCommInitRank(&m.comm, world.size(), boot.id, world.rank()));
}

NcclCommunicator::~NcclCommunicator() {
  Impl& m = *impl_;
  if (!m.comm) return;
  // ncclCommDestroy and ncclCommAbort both wait until every CUDA graph that captured this
  // communicator's collectives is gone, and the backend (which owns the step's graph) outlives us
  // in the trainer: drop that graph first, or this would hang at the end of every captured run.
  if (m.captured) cuda::release_graph_on_stream(m.compute);
  if (std::uncaught_exceptions() > 0) {
    // Error path: peers may never join another collective; do not wait for them.
    ncclCommAbort(m.comm);
    return;
  }
  AMP_CUDA_WARN(cudaStreamSynchronize(m.comm_stream.get()));
  const ncclResult_t r = ncclCommDestroy(m.comm);
  if (r != ncclSuccess) std::fprintf(stderr, "warning: ncclCommDestroy failed: %s\n", ncclGetErrorString(r));
}

int NcclCommunicator::rank() const { return impl_->world.rank(); }
int NcclCommunicator::size() const { return impl_->world.size(); }
int NcclCommunicator::local_rank() const { return impl_->world.local_rank(); }
int NcclCommunicator::local_size() const { return impl_->world.local_size(); }

std::unique_ptr<Request> NcclCommunicator::iallreduce(BufView buf, ReduceOp op) {
  Impl& m = *impl_;
  const ncclDataType_t type = nccl_type(buf.dtype);
  const ncclRedOp_t rop = nccl_op(op, buf.dtype);
  if (buf.count == 0) return std::make_unique<NcclRequest>(m.events, m.comm, m.compute, Event(), Event(), Event());
  m.order_after_compute();
  // Timing events cannot be recorded into a graph for later reading: only outside a capture.
  const bool timed = !is_capturing(m.compute);
  m.captured = m.captured || !timed;
  Event t0 = timed ? m.events->take(true) : Event(), t1 = timed ? m.events->take(true) : Event();
  if (timed) CUDA_CHECK(cudaEventRecord(t0.get(), m.comm_stream.get()));
  NCCL_CHECK(ncclAllReduce(buf.data, buf.data, buf.count, type, rop, m.comm, m.comm_stream.get()));
  if (timed) CUDA_CHECK(cudaEventRecord(t1.get(), m.comm_stream.get()));
  Event done = m.events->take(false);
  CUDA_CHECK(cudaEventRecord(done.get(), m.comm_stream.get()));
  return std::make_unique<NcclRequest>(m.events, m.comm, m.compute, std::move(done), std::move(t0), std::move(t1));
}

void NcclCommunicator::allreduce(BufView buf, ReduceOp op) { iallreduce(buf, op)->wait(); }

void NcclCommunicator::broadcast(BufView buf, int root) {
  Impl& m = *impl_;
  if (buf.count == 0) return;
  m.order_after_compute();
  m.captured = m.captured || is_capturing(m.compute);
  NCCL_CHECK(ncclBroadcast(buf.data, buf.data, buf.count, nccl_type(buf.dtype), root, m.comm, m.comm_stream.get()));
  m.join_compute();
}

void NcclCommunicator::allgather(const void* send, void* recv, size_t bytes) {
  Impl& m = *impl_;
  if (bytes == 0) return;
  m.order_after_compute();
  m.captured = m.captured || is_capturing(m.compute);
  NCCL_CHECK(ncclAllGather(send, recv, bytes, ncclUint8, m.comm, m.comm_stream.get()));
  m.join_compute();
}

void NcclCommunicator::barrier() {
  Impl& m = *impl_;
  m.order_after_compute();
  NCCL_CHECK(ncclAllReduce(m.barrier_word.get(), m.barrier_word.get(), 1, ncclInt32, ncclSum, m.comm,
                           m.comm_stream.get()));
  CUDA_CHECK(cudaStreamSynchronize(m.comm_stream.get()));
}

void NcclCommunicator::abort(int exit_code) {
  if (impl_->comm) {
    if (impl_->captured) cuda::release_graph_on_stream(impl_->compute);  // see the destructor
    ncclCommAbort(impl_->comm);
    impl_->comm = nullptr;
  }
  impl_->world.abort(exit_code);
}

}  // namespace amp
