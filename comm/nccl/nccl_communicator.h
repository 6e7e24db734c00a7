// The NCCL communicator: collectives on device buffers, bootstrapped by broadcasting the
// ncclUniqueId over the MPI world. Collectives run on a communication stream of their own,
// ordered after the compute stream by events; waiting for one makes the compute stream wait (no
// host blocking), so a step that uses it can be captured into a CUDA graph. Its step clock times
// the gradient reducer's collectives with events that a graph replay records too. No NCCL or CUDA
// header is included here.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/device_stream.h"
#include "comm/grad_reducer.h"

namespace amp {

class NcclCommunicator final : public Communicator, public StepClock {
 public:
  // stream: the compute stream's owner (the CUDA backend); world: the host communicator the
  // unique id is broadcast over; device: the CUDA device of this rank (-1: the current one).
  // Collective over the world: every rank must construct it.
  NcclCommunicator(Communicator& world, DeviceStream& stream, int device = -1);
  // ncclCommDestroy; ncclCommAbort instead while an exception unwinds or after an NCCL error.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  std::string name() const override { return "nccl"; }
  int rank() const override;
  int size() const override;
  int local_rank() const override;
  int local_size() const override;

  // Device buffers only. allreduce/reduce_scatter/broadcast/allgather return once the work is enqueued and the
  // compute stream made to wait for it; barrier() blocks the host. Requests' seconds() are 0: the
  // step clock below times the collectives.
  void allreduce(BufView buf, ReduceOp op) override;
  std::unique_ptr<Request> iallreduce(BufView buf, ReduceOp op) override;
  void reduce_scatter(const void* send, BufView recv, ReduceOp op) override;
  std::unique_ptr<Request> ireduce_scatter(const void* send, BufView recv, ReduceOp op) override;
  void allgather_in_place(BufView all) override;
  // On the communication stream; the request's wait makes the compute stream wait for it.
  std::unique_ptr<Request> iallgather_in_place(BufView all) override;
  void broadcast(BufView buf, int root) override;
  void allgather(const void* send, void* recv, size_t bytes) override;
  void barrier() override;
  [[noreturn]] void abort(int exit_code) override;
  // Polls ncclCommGetAsyncError (a host call, no device synchronization). On an error the
  // communicator is aborted (its kernels stop, replays of a captured step are dropped) and an
  // Error of kind Comm says "NCCL error on rank R: <reason> (<NCCL's last error>)". Every later
  // use of the communicator throws. Host waits of the backend on the compute stream (download,
  // synchronize) run this check while they wait, so a failed collective cannot hang them.
  void check_async_errors() override;

  // StepClock (see comm/grad_reducer.h): the collectives issued between clock_begin_step() and
  // clock_wait_ends() are timed by events on the communication stream, the wait by events on the
  // compute stream. A step recorded into a CUDA graph is read once per launch of the graph, when
  // that launch has completed before the next one is launched.
  void clock_begin_step() override;
  void clock_wait_begins() override;
  void clock_wait_ends() override;
  bool clock_poll(double* comm_seconds, double* exposed_seconds) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace amp
