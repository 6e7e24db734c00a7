#include "comm/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "comm/mpi_ops.h"
#include "core/error.h"

namespace amp {

using namespace mpi;

namespace {

MPI_Comm as_comm(void* p) { return *static_cast<MPI_Comm*>(p); }

class MpiRequest final : public Request {
 public:
  MpiRequest(std::shared_future<void> f, std::shared_ptr<double> secs) : f_(std::move(f)), secs_(std::move(secs)) {}
  void wait() override { f_.get(); }
  bool test() override { return f_.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }
  double seconds() const override { return *secs_; }

 private:
  std::shared_future<void> f_;
  std::shared_ptr<double> secs_;  // written by the worker before the future is made ready
};

// The watchdogs' side channel: small point-to-point messages on a communicator of their own.
class MpiPeerChannel final : public PeerChannel {
 public:
  explicit MpiPeerChannel(MPI_Comm comm) : comm_(comm) {}
  ~MpiPeerChannel() override {
    for (auto& p : pending_) MPI_Request_free(&p.first);
  }
  void send(int to, int tag, const std::string& msg) override {
    auto buf = std::make_unique<std::string>(msg);
    MPI_Request req;
    if (MPI_Isend(buf->data(), int(buf->size()), MPI_CHAR, to, tag, comm_, &req) == MPI_SUCCESS)
      pending_.emplace_back(req, std::move(buf));
    reap();
  }
  bool poll(int* from, int* tag, std::string* msg) override {
    reap();
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, &st) != MPI_SUCCESS || !flag) return false;
    int n = 0;
    MPI_Get_count(&st, MPI_CHAR, &n);
    msg->assign(size_t(std::max(n, 0)), '\0');
    MPI_Recv(msg->data(), n, MPI_CHAR, st.MPI_SOURCE, st.MPI_TAG, comm_, MPI_STATUS_IGNORE);
    *from = st.MPI_SOURCE;
    *tag = st.MPI_TAG;
    return true;
  }

 private:
  void reap() {
    for (size_t i = 0; i < pending_.size();) {
      int done = 0;
      MPI_Test(&pending_[i].first, &done, MPI_STATUS_IGNORE);
      if (done) {
        pending_[i] = std::move(pending_.back());
        pending_.pop_back();
      } else {
        ++i;
      }
    }
  }
  MPI_Comm comm_;
  std::vector<std::pair<MPI_Request, std::unique_ptr<std::string>>> pending_;
};

// What the watchdog says about a collective on buf.
Watchdog::Detail detail_of(BufView buf, const char* op, int root = -1) {
  Watchdog::Detail d;
  d.bytes = buf.bytes();
  d.dtype = dtype_name(buf.dtype);
  d.op = op;
  d.root = root;
  return d;
}


}  // namespace

MpiCommunicator::MpiCommunicator(int* argc, char*** argv) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    finalize_ = true;
    if (provided < MPI_THREAD_MULTIPLE)
      throw Error(ErrorKind::Comm, "the MPI library does not provide MPI_THREAD_MULTIPLE (got level " +
                                       std::to_string(provided) + ")");
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  world_ = new MPI_Comm(MPI_COMM_WORLD);
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  MPI_Comm node;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_rank(node, &local_rank_));
  MPI_CHECK(MPI_Comm_size(node, &local_size_));
  MPI_Comm_free(&node);
  auto* wc = new MPI_Comm;
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, wc));
  MPI_Comm_set_errhandler(*wc, MPI_ERRORS_RETURN);
  worker_comm_ = wc;
  auto* dc = new MPI_Comm;
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, dc));
  MPI_Comm_set_errhandler(*dc, MPI_ERRORS_RETURN);
  watchdog_comm_ = dc;
  create_ops();
  worker_ = std::thread([this] { worker_loop(); });
}

MpiCommunicator::~MpiCommunicator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  watchdog_.reset();
  free_ops();
  for (void* c : {worker_comm_, watchdog_comm_}) {
    auto* comm = static_cast<MPI_Comm*>(c);
    MPI_Comm_free(comm);
    delete comm;
  }
  delete static_cast<MPI_Comm*>(world_);
  if (finalize_) MPI_Finalize();
}

void MpiCommunicator::worker_loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ with nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

void MpiCommunicator::run_allreduce(void* comm_handle, BufView buf, ReduceOp op) {
  // The arguments are checked on any number of ranks (as NCCL does), before the shortcuts.
  AMP_CHECK(!(op == ReduceOp::Avg && (buf.dtype == DType::I32 || buf.dtype == DType::U8)),
            "average of integers is not defined");
  if (buf.count == 0 || size_ == 1) {
    return;  // a sum or max over one rank is the input itself
  }
  Watchdog::Wait wait(watchdog_.get(), "all-reduce", detail_of(buf, reduce_op_name(op)));
  const MPI_Comm comm = as_comm(comm_handle);
  const MPI_Datatype type = mpi_type(buf.dtype);
  const MPI_Op mop = mpi_op(buf.dtype, op);
  const size_t esize = dtype_size(buf.dtype);
  constexpr size_t kMaxCount = size_t(1) << 30;  // MPI counts are int
  char* p = static_cast<char*>(buf.data);
  for (size_t off = 0; off < buf.count; off += kMaxCount) {
    const int n = static_cast<int>(std::min(kMaxCount, buf.count - off));
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p + off * esize, n, type, mop, comm));
  }
  if (op == ReduceOp::Avg) divide_in_place(buf, size_);
}

void MpiCommunicator::allreduce(BufView buf, ReduceOp op) { run_allreduce(world_, buf, op); }

std::unique_ptr<Request> MpiCommunicator::enqueue(std::function<void()> task) {
  auto promise = std::make_shared<std::promise<void>>();
  auto secs = std::make_shared<double>(0.0);
  std::shared_future<void> fut = promise->get_future().share();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back([task = std::move(task), promise, secs] {
      try {
        const auto t0 = std::chrono::steady_clock::now();
        task();
        *secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        promise->set_value();
      } catch (...) {
        promise->set_exception(std::current_exception());
      }
    });
  }
  cv_.notify_one();
  return std::make_unique<MpiRequest>(fut, secs);
}

std::unique_ptr<Request> MpiCommunicator::iallreduce(BufView buf, ReduceOp op) {
  return enqueue([this, buf, op] { run_allreduce(worker_comm_, buf, op); });
}

void MpiCommunicator::run_reduce_scatter(void* comm_handle, const void* send, BufView recv, ReduceOp op) {
  AMP_CHECK(!(op == ReduceOp::Avg && (recv.dtype == DType::I32 || recv.dtype == DType::U8)),
            "average of integers is not defined");
  AMP_CHECK(op != ReduceOp::Max, "reduce-scatter: max is not implemented");
  if (recv.count == 0) return;
  if (size_ == 1) {
    std::memcpy(recv.data, send, recv.bytes());
    return;
  }
  Watchdog::Wait wait(watchdog_.get(), "reduce-scatter", detail_of(recv, reduce_op_name(op)));
  // A ring of MPI_Sendrecv with the 16-bit adds: 1.2-2.7x faster than Open MPI's
  // MPI_Reduce_scatter_block with the same user ops on 1-16 MiB (docs/benchmarks.md).
  ring_reduce_scatter(as_comm(comm_handle), rank_, size_, static_cast<const char*>(send), recv);
  if (op == ReduceOp::Avg) divide_in_place(recv, size_);
}

void MpiCommunicator::reduce_scatter(const void* send, BufView recv, ReduceOp op) {
  run_reduce_scatter(world_, send, recv, op);
}

std::unique_ptr<Request> MpiCommunicator::ireduce_scatter(const void* send, BufView recv, ReduceOp op) {
  return enqueue([this, send, recv, op] { run_reduce_scatter(worker_comm_, send, recv, op); });
}

void MpiCommunicator::run_allgather_in_place(void* comm_handle, BufView all) {
  if (all.count == 0 || size_ == 1) return;
  AMP_CHECK(all.count % size_t(size_) == 0, "all-gather of ", all.count, " elements over ", size_, " ranks");
  const size_t block = all.bytes() / size_t(size_);
  AMP_CHECK(block <= size_t(INT_MAX), "all-gather blocks of more than 2 GiB");
  Watchdog::Wait wait(watchdog_.get(), "all-gather", detail_of(all, nullptr));
  ring_allgather(as_comm(comm_handle), rank_, size_, static_cast<char*>(all.data), block);
}

void MpiCommunicator::allgather_in_place(BufView all) { run_allgather_in_place(world_, all); }

std::unique_ptr<Request> MpiCommunicator::iallgather_in_place(BufView all) {
  return enqueue([this, all] { run_allgather_in_place(worker_comm_, all); });
}

void MpiCommunicator::raw_allreduce(BufView buf, ReduceOp op) {
  AMP_CHECK(buf.dtype == DType::F32 || buf.dtype == DType::I32, "raw_allreduce takes f32 or i32");
  AMP_CHECK(buf.count <= size_t(INT_MAX), "count too large");
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf.data, static_cast<int>(buf.count), mpi_type(buf.dtype),
                          op == ReduceOp::Max ? MPI_MAX : MPI_SUM, as_comm(world_)));
}

void MpiCommunicator::broadcast(BufView buf, int root) {
  Watchdog::Wait wait(watchdog_.get(), "broadcast", detail_of(buf, nullptr, root));
  constexpr size_t kMaxBytes = size_t(1) << 30;
  char* p = static_cast<char*>(buf.data);
  const size_t bytes = buf.bytes();
  for (size_t off = 0; off < bytes; off += kMaxBytes) {
    const int n = static_cast<int>(std::min(kMaxBytes, bytes - off));
    MPI_CHECK(MPI_Bcast(p + off, n, MPI_BYTE, root, as_comm(world_)));
  }
}

void MpiCommunicator::allgather(const void* send, void* recv, size_t bytes) {
  AMP_CHECK(bytes <= size_t(INT_MAX), "allgather is for small buffers");
  Watchdog::Wait wait(watchdog_.get(), "all-gather", detail_of(BufView{nullptr, bytes, DType::U8}, nullptr));
  MPI_CHECK(MPI_Allgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes), MPI_BYTE,
                          as_comm(world_)));
}

void MpiCommunicator::gather(const void* send, void* recv, size_t bytes, int root) {
  AMP_CHECK(bytes <= size_t(INT_MAX), "gather blocks of more than 2 GiB (callers chunk)");
  Watchdog::Wait wait(watchdog_.get(), "gather", detail_of(BufView{nullptr, bytes, DType::U8}, nullptr, root));
  MPI_CHECK(MPI_Gather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes), MPI_BYTE, root,
                       as_comm(world_)));
}

void MpiCommunicator::barrier() {
  Watchdog::Wait wait(watchdog_.get(), "barrier");
  MPI_CHECK(MPI_Barrier(as_comm(world_)));
}

void MpiCommunicator::set_step(int64_t step) {
  if (watchdog_) watchdog_->set_step(step);
}

void MpiCommunicator::start_watchdog(double timeout_s) {
  if (size_ < 2) return;
  if (watchdog_) {
    watchdog_->set_timeout(timeout_s);
    return;
  }
  watchdog_ = std::make_unique<Watchdog>(rank_, size_, timeout_s,
                                         std::make_unique<MpiPeerChannel>(as_comm(watchdog_comm_)),
                                         [](const std::string& message, int code) {
                                           std::fprintf(stderr, "%s\n", message.c_str());
                                           std::fflush(stderr);
                                           MPI_Abort(MPI_COMM_WORLD, code);
                                           std::_Exit(code);
                                         });
}

void MpiCommunicator::abort(int exit_code) {
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

}  // namespace amp
