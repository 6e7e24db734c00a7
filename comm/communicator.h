// The communicator seam: collectives over typed buffer views, blocking and non-blocking.
// Implementations: MPI (host buffers, always built) and NCCL (device buffers, when built).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.h"

namespace amp {

class Watchdog;  // comm/watchdog.h

enum class ReduceOp { Sum, Avg, Max };
const char* reduce_op_name(ReduceOp op);

// A typed view of a buffer: element count and type travel together, so a byte count can never be
// passed where an element count is expected.
struct BufView {
  void* data = nullptr;
  size_t count = 0;
  DType dtype = DType::F32;
  size_t bytes() const { return count * dtype_size(dtype); }
};

template <typename T>
BufView view_of(T* p, size_t n);  // specialized for float, int32_t, uint8_t, Half, BFloat16

// Completion handle of a non-blocking collective.
class Request {
 public:
  virtual ~Request() = default;
  virtual void wait() = 0;  // blocks until done; rethrows the collective's error
  virtual bool test() = 0;  // true when done (never blocks)
  // Seconds the collective itself took where it ran (after wait(); 0 if not measured).
  virtual double seconds() const { return 0.0; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;  // rank among the processes of this node
  virtual int local_size() const = 0;

  // In-place all-reduce. 16-bit sums add in FP32 and round once per combining step.
  virtual void allreduce(BufView buf, ReduceOp op) = 0;
  // Non-blocking all-reduce; collectives complete in the order they were issued.
  virtual std::unique_ptr<Request> iallreduce(BufView buf, ReduceOp op) = 0;
  // Reduce-scatter: send holds size() blocks of recv.count elements of recv.dtype; this rank
  // receives the reduction of block rank() in recv (a separate buffer). Same arithmetic as the
  // all-reduce; the non-blocking form completes in issue order with the all-reduces.
  virtual void reduce_scatter(const void* send, BufView recv, ReduceOp op);
  virtual std::unique_ptr<Request> ireduce_scatter(const void* send, BufView recv, ReduceOp op);
  // In-place all-gather: all holds size() blocks of all.count / size() elements, block rank() this
  // rank's; afterwards every block holds its rank's.
  virtual void allgather_in_place(BufView all);
  // Non-blocking form, completing in issue order with the other non-blocking collectives. The
  // default runs the blocking one at once and returns a completed request (test doubles; a
  // communicator with non-blocking collectives pending must override it).
  virtual std::unique_ptr<Request> iallgather_in_place(BufView all);
  virtual void broadcast(BufView buf, int root) = 0;
  // Gathers `bytes` from every rank into recv (size() * bytes), in rank order.
  virtual void allgather(const void* send, void* recv, size_t bytes) = 0;
  // Gathers `bytes` (at most 2 GiB: callers chunk) from every rank into root's recv (size() *
  // bytes, in rank order); recv is not touched elsewhere (it may be null there).
  virtual void gather(const void* send, void* recv, size_t bytes, int root);
  virtual void barrier() = 0;
  // Ends every rank of the job at once (the error path: no rank is left waiting).
  [[noreturn]] virtual void abort(int exit_code) = 0;
  // The training step later collectives belong to (named by the collective watchdog).
  virtual void set_step(int64_t /*step*/) {}
  // Raises an error that a collective enqueued earlier met asynchronously (NCCL); never blocks.
  virtual void check_async_errors() {}
  // The collective watchdog that watches this communicator's collectives, where one runs; callers
  // mark their other long waits with Watchdog::Wait on it (nullptr: nothing watches).
  virtual Watchdog* watchdog() { return nullptr; }
};

}  // namespace amp
