#include "comm/communicator.h"

#include "core/error.h"
#include "core/half.h"

namespace amp {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

template <> BufView view_of<float>(float* p, size_t n) { return {p, n, DType::F32}; }
template <> BufView view_of<int32_t>(int32_t* p, size_t n) { return {p, n, DType::I32}; }
template <> BufView view_of<uint8_t>(uint8_t* p, size_t n) { return {p, n, DType::U8}; }
template <> BufView view_of<Half>(Half* p, size_t n) { return {p, n, DType::F16}; }
template <> BufView view_of<BFloat16>(BFloat16* p, size_t n) { return {p, n, DType::BF16}; }

// The collectives a communicator may lack (test doubles): a clear error, never a silent no-op.
void Communicator::reduce_scatter(const void*, BufView, ReduceOp) {
  throw Error(ErrorKind::Internal, strcat("the ", name(), " communicator has no reduce-scatter"));
}
std::unique_ptr<Request> Communicator::ireduce_scatter(const void*, BufView, ReduceOp) {
  throw Error(ErrorKind::Internal, strcat("the ", name(), " communicator has no reduce-scatter"));
}
void Communicator::allgather_in_place(BufView) {
  throw Error(ErrorKind::Internal, strcat("the ", name(), " communicator has no in-place all-gather"));
}
void Communicator::gather(const void*, void*, size_t, int) {
  throw Error(ErrorKind::Internal, strcat("the ", name(), " communicator has no gather"));
}

namespace {
class DoneRequest final : public Request {
 public:
  void wait() override {}
  bool test() override { return true; }
};
}  // namespace

std::unique_ptr<Request> Communicator::iallgather_in_place(BufView all) {
  allgather_in_place(all);
  return std::make_unique<DoneRequest>();
}

}  // namespace amp
