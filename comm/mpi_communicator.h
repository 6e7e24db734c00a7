// MPI communicator on host buffers. Owns MPI initialization (MPI_THREAD_MULTIPLE) for the process.
// Non-blocking collectives run, in issue order, on a worker thread that owns a duplicate of
// MPI_COMM_WORLD, so they progress while the caller computes (Open MPI has no progress thread).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "comm/communicator.h"
#include "comm/watchdog.h"

namespace amp {

class MpiCommunicator final : public Communicator {
 public:
  // Initializes MPI if needed (works under mpirun, srun --mpi=pmix, or without a launcher).
  MpiCommunicator(int* argc, char*** argv);
  ~MpiCommunicator() override;  // joins the worker and finalizes MPI
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  std::string name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }

  void allreduce(BufView buf, ReduceOp op) override;
  std::unique_ptr<Request> iallreduce(BufView buf, ReduceOp op) override;
  void reduce_scatter(const void* send, BufView recv, ReduceOp op) override;
  std::unique_ptr<Request> ireduce_scatter(const void* send, BufView recv, ReduceOp op) override;
  void allgather_in_place(BufView all) override;
  std::unique_ptr<Request> iallgather_in_place(BufView all) override;
  void broadcast(BufView buf, int root) override;
  void allgather(const void* send, void* recv, size_t bytes) override;
  void gather(const void* send, void* recv, size_t bytes, int root) override;
  void barrier() override;
  [[noreturn]] void abort(int exit_code) override;
  void set_step(int64_t step) override;

  // Starts the collective watchdog (several ranks only; a second call changes the timeout). Every
  // collective of this communicator is watched; watch() marks other waits on other ranks.
  void start_watchdog(double timeout_s);
  Watchdog* watchdog() override { return watchdog_.get(); }

  // Blocking all-reduce on the caller's thread with the plain MPI datatype and op (f32 and i32 only):
  // the peer the 16-bit path is benchmarked against.
  void raw_allreduce(BufView buf, ReduceOp op);

 private:
  void worker_loop();
  void run_allreduce(void* comm_handle, BufView buf, ReduceOp op);
  void run_reduce_scatter(void* comm_handle, const void* send, BufView recv, ReduceOp op);
  void run_allgather_in_place(void* comm_handle, BufView all);
  // Runs task on the worker thread after the collectives issued before it.
  std::unique_ptr<Request> enqueue(std::function<void()> task);

  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  bool finalize_ = false;
  void* world_ = nullptr;   // MPI_Comm (kept opaque here: no mpi.h in headers)
  void* worker_comm_ = nullptr;
  void* watchdog_comm_ = nullptr;  // the watchdogs' side channel
  std::unique_ptr<Watchdog> watchdog_;
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
};

}  // namespace amp
