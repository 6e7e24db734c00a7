// The NCCL communicator: collectives on device buffers, bootstrapped by broadcasting the
// ncclUniqueId over the MPI world. Collectives run on a communication stream of their own,
// ordered after the compute stream by events; waiting for one makes the compute stream wait (no
// host blocking), so a step that uses it can be captured into a CUDA graph. No NCCL or CUDA header
// is included here.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/mpi_communicator.h"

namespace amp {

class NcclCommunicator final : public Communicator {
 public:
  // compute_stream: the backend's cudaStream_t (Backend::native_stream()); device: the CUDA device
  // of this rank (-1: the current one). Collective over the world: every rank must construct it.
  NcclCommunicator(MpiCommunicator& world, void* compute_stream, int device = -1);
  ~NcclCommunicator() override;  // ncclCommDestroy, or ncclCommAbort while an exception unwinds
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  std::string name() const override { return "nccl"; }
  int rank() const override;
  int size() const override;
  int local_rank() const override;
  int local_size() const override;

  // Device buffers only. allreduce/broadcast/allgather return once the work is enqueued and the
  // compute stream made to wait for it; barrier() blocks the host.
  void allreduce(BufView buf, ReduceOp op) override;
  std::unique_ptr<Request> iallreduce(BufView buf, ReduceOp op) override;
  void broadcast(BufView buf, int root) override;
  void allgather(const void* send, void* recv, size_t bytes) override;
  void barrier() override;
  [[noreturn]] void abort(int exit_code) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace amp
