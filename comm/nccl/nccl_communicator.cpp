#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "comm/nccl/nccl_impl.h"

namespace amp {

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

std::unique_ptr<Request> NcclCommunicator::iallgather_in_place(BufView all) {
  const size_t world = size_t(size());
  AMP_CHECK(all.count % world == 0, "all-gather of ", all.count, " elements over ", world, " ranks");
  const size_t block = all.bytes() / world;
  char* base = static_cast<char*>(all.data);
  const size_t mine = size_t(rank()) * block;
  // In place, as allgather_in_place; outside the step's timing marks (issued after they close).
  return impl_->timed(all.count, [&](ncclComm_t comm, cudaStream_t s) {
    return ncclAllGather(base + mine, base, block, ncclUint8, comm, s);
  });
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

}  // namespace amp
