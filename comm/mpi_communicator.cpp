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

#include "core/convert.h"
#include "core/error.h"
#include "core/half.h"

namespace amp {

namespace {

#define MPI_CHECK(call)                                                                      \
  do {                                                                                       \
    const int rc_ = (call);                                                                  \
    if (rc_ != MPI_SUCCESS) {                                                                \
      char msg_[MPI_MAX_ERROR_STRING];                                                       \
      int len_ = 0;                                                                          \
      MPI_Error_string(rc_, msg_, &len_);                                                    \
      throw Error(ErrorKind::Comm, strcat(__FILE__, ":", __LINE__, ": ", #call, " failed: ", \
                                          std::string(msg_, len_)));                         \
    }                                                                                        \
  } while (0)

MPI_Comm as_comm(void* p) { return *static_cast<MPI_Comm*>(p); }

// ---- user-defined reductions on 16-bit floats (and NaN-propagating float max) ------------
// The arithmetic is FP32 with one rounding per combining step (sums: the vectorized f16_add /
// bf16_add; maxima, used for small flag buffers only: chunks through the conversions).
constexpr int kChunk = 512;

template <bool kBf16>
void sum16(void* in, void* inout, int* len, MPI_Datatype*) {
  (kBf16 ? bf16_add : f16_add)(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(inout), size_t(*len));
}

template <bool kBf16>
void max16(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  alignas(64) float fa[kChunk], fb[kChunk];
  for (int off = 0; off < *len; off += kChunk) {
    const int n = std::min(kChunk, *len - off);
    if (kBf16) {
      bf16_to_f32(a + off, fa, n);
      bf16_to_f32(b + off, fb, n);
    } else {
      f16_to_f32(a + off, fa, n);
      f16_to_f32(b + off, fb, n);
    }
    for (int i = 0; i < n; ++i) {
      const float x = fa[i], y = fb[i];
      fb[i] = (x != x || y != y) ? x + y : (x > y ? x : y);
    }
    if (kBf16) f32_to_bf16(fb, b + off, n);
    else f32_to_f16(fb, b + off, n);
  }
}

void max_f32(void* in, void* inout, int* len, MPI_Datatype*) {
  const float* a = static_cast<const float*>(in);
  float* b = static_cast<float*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = a[i], y = b[i];
    b[i] = (x != x || y != y) ? x + y : (x > y ? x : y);
  }
}

struct Ops {
  MPI_Op f16_sum, bf16_sum, f16_max, bf16_max, f32_max;
};
Ops g_ops;  // created once after MPI_Init, freed before MPI_Finalize

void create_ops() {
  MPI_CHECK(MPI_Op_create(&sum16<false>, 1, &g_ops.f16_sum));
  MPI_CHECK(MPI_Op_create(&sum16<true>, 1, &g_ops.bf16_sum));
  MPI_CHECK(MPI_Op_create(&max16<false>, 1, &g_ops.f16_max));
  MPI_CHECK(MPI_Op_create(&max16<true>, 1, &g_ops.bf16_max));
  MPI_CHECK(MPI_Op_create(&max_f32, 1, &g_ops.f32_max));
}

void free_ops() {
  for (MPI_Op* op : {&g_ops.f16_sum, &g_ops.bf16_sum, &g_ops.f16_max, &g_ops.bf16_max, &g_ops.f32_max})
    MPI_Op_free(op);
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F16:
    case DType::BF16: return MPI_UINT16_T;
    case DType::I32: return MPI_INT32_T;
    case DType::U8: return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(DType t, ReduceOp op) {
  const bool max = op == ReduceOp::Max;
  switch (t) {
    case DType::F32: return max ? g_ops.f32_max : MPI_SUM;
    case DType::F16: return max ? g_ops.f16_max : g_ops.f16_sum;
    case DType::BF16: return max ? g_ops.bf16_max : g_ops.bf16_sum;
    case DType::I32:
    case DType::U8: return max ? MPI_MAX : MPI_SUM;
  }
  return MPI_OP_NULL;
}

// Average = sum, then one multiplication by 1/size (a second rounding for 16-bit types).
void divide_in_place(BufView buf, int size) {
  const float inv = 1.0f / static_cast<float>(size);
  if (buf.dtype == DType::F32) {
    float* p = static_cast<float*>(buf.data);
    for (size_t i = 0; i < buf.count; ++i) p[i] *= inv;
    return;
  }
  AMP_CHECK(is_float16(buf.dtype), "average is defined for float types only, got ", dtype_name(buf.dtype));
  uint16_t* p = static_cast<uint16_t*>(buf.data);
  alignas(64) float f[kChunk];
  for (size_t off = 0; off < buf.count; off += kChunk) {
    const size_t n = std::min<size_t>(kChunk, buf.count - off);
    convert(p + off, buf.dtype, f, DType::F32, n);
    for (size_t i = 0; i < n; ++i) f[i] *= inv;
    convert(f, DType::F32, p + off, buf.dtype, n);
  }
}

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


// inout[i] += in[i] in the buffer's type (16-bit: FP32 add, one rounding: the MPI ops' arithmetic).
void add_into(const void* in, void* inout, size_t n, DType t) {
  switch (t) {
    case DType::F16: f16_add(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(inout), n); return;
    case DType::BF16: bf16_add(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(inout), n); return;
    case DType::F32: {
      const float* a = static_cast<const float*>(in);
      float* b = static_cast<float*>(inout);
      for (size_t i = 0; i < n; ++i) b[i] = a[i] + b[i];
      return;
    }
    case DType::I32: {
      const int32_t* a = static_cast<const int32_t*>(in);
      int32_t* b = static_cast<int32_t*>(inout);
      for (size_t i = 0; i < n; ++i) b[i] = int32_t(uint32_t(a[i]) + uint32_t(b[i]));
      return;
    }
    case DType::U8: {
      const uint8_t* a = static_cast<const uint8_t*>(in);
      uint8_t* b = static_cast<uint8_t*>(inout);
      for (size_t i = 0; i < n; ++i) b[i] = uint8_t(a[i] + b[i]);
      return;
    }
  }
}

constexpr int kRingTag = 7301;

// Ring reduce-scatter (sum): in N - 1 steps each rank passes a running partial sum of one block to
// the next rank and adds its own input for the block it receives; the last block it receives is
// its own, complete. Every element is added once per rank, in ring order.
void ring_reduce_scatter(MPI_Comm comm, int rank, int size, const char* send, BufView recv) {
  const size_t bytes = recv.bytes();
  AMP_CHECK(bytes <= size_t(INT_MAX), "reduce-scatter blocks of more than 2 GiB");
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  auto block = [&](int b) { return send + size_t((b % size + size) % size) * bytes; };
  std::unique_ptr<char[]> got(new char[bytes]), acc(size > 2 ? new char[bytes] : nullptr);
  const char* outgoing = block(rank - 1);  // step 0 sends this rank's input itself
  for (int s = 0; s < size - 1; ++s) {
    MPI_CHECK(MPI_Sendrecv(outgoing, int(bytes), MPI_BYTE, next, kRingTag, got.get(), int(bytes), MPI_BYTE, prev,
                           kRingTag, comm, MPI_STATUS_IGNORE));
    // got: the running sum of block (rank - s - 2) from the previous ranks; add this rank's part.
    char* out = s == size - 2 ? static_cast<char*>(recv.data) : acc.get();
    std::memcpy(out, block(rank - s - 2), bytes);
    add_into(got.get(), out, recv.count, recv.dtype);
    outgoing = out;
  }
}

// Ring all-gather in place: in N - 1 steps each rank forwards the block it received last.
void ring_allgather(MPI_Comm comm, int rank, int size, char* buf, size_t bytes) {
  AMP_CHECK(bytes <= size_t(INT_MAX), "all-gather blocks of more than 2 GiB");
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  auto block = [&](int b) { return buf + size_t((b % size + size) % size) * bytes; };
  for (int s = 0; s < size - 1; ++s)
    MPI_CHECK(MPI_Sendrecv(block(rank - s), int(bytes), MPI_BYTE, next, kRingTag + 1, block(rank - s - 1), int(bytes),
                           MPI_BYTE, prev, kRingTag + 1, comm, MPI_STATUS_IGNORE));
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
  if (buf.count == 0 || size_ == 1) {
    return;  // a sum or max over one rank is the input itself
  }
  AMP_CHECK(!(op == ReduceOp::Avg && (buf.dtype == DType::I32 || buf.dtype == DType::U8)),
            "average of integers is not defined");
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
  if (recv.count == 0) return;
  AMP_CHECK(!(op == ReduceOp::Avg && (recv.dtype == DType::I32 || recv.dtype == DType::U8)),
            "average of integers is not defined");
  if (size_ == 1) {
    std::memcpy(recv.data, send, recv.bytes());
    return;
  }
  AMP_CHECK(op != ReduceOp::Max, "reduce-scatter: max is not implemented");
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

void MpiCommunicator::allgather_in_place(BufView all) {
  if (all.count == 0 || size_ == 1) return;
  AMP_CHECK(all.count % size_t(size_) == 0, "all-gather of ", all.count, " elements over ", size_, " ranks");
  const size_t block = all.bytes() / size_t(size_);
  AMP_CHECK(block <= size_t(INT_MAX), "all-gather blocks of more than 2 GiB");
  Watchdog::Wait wait(watchdog_.get(), "all-gather", detail_of(all, nullptr));
  ring_allgather(as_comm(world_), rank_, size_, static_cast<char*>(all.data), block);
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
