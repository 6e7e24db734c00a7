// Bucketed gradient all-reduce overlapped with backward. The flat gradient buffer is cut into
// contiguous buckets from its end (the last layer's gradients are ready first): a small first
// bucket, then buckets of bucket_bytes; a bucket may split a tensor. When backward has completed
// every tensor a bucket overlaps, the bucket is checked for non-finite values (this rank's flag
// slot) and its non-blocking sum starts, while backward goes on with earlier layers.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"

namespace amp {

struct Bucket {
  size_t begin = 0, end = 0;      // element range in the flat gradient buffer
  int first_tensor = 0, last_tensor = 0;  // tensors overlapping the range (inclusive)
};

struct ReducerStats {
  double comm_seconds = 0;     // time the collectives took, summed (measured where they run)
  double exposed_seconds = 0;  // time the caller waited for them after backward
  size_t bytes = 0;            // bytes all-reduced per step
};

class GradReducer {
 public:
  // grads: flat buffer of `dtype` in backend memory; local_flag: this rank's flag slot (backend
  // memory) that the pre-reduction check writes.
  GradReducer(Communicator& comm, Backend& be, std::vector<TensorSpan> spans, size_t total, DType dtype,
              void* grads, size_t first_bucket_bytes, size_t bucket_bytes, int32_t* local_flag);

  // overlap = false: buckets are reduced one after the other, blocking, in finish() (no
  // communication thread competing with backward for the cores).
  void set_overlap(bool overlap) { overlap_ = overlap; }
  bool overlap() const { return overlap_; }

  void begin_step();
  void tensor_ready(int tensor);  // backward finished this tensor's gradient
  void finish();                  // waits for every bucket; afterwards grads hold the sum

  const std::vector<Bucket>& buckets() const { return buckets_; }
  const ReducerStats& last_step() const { return last_; }
  bool active() const { return comm_.size() > 1; }

 private:
  void launch(size_t b);

  Communicator& comm_;
  Backend& be_;
  std::vector<TensorSpan> spans_;
  DType dtype_;
  void* grads_;
  int32_t* local_flag_;
  std::vector<Bucket> buckets_;
  std::vector<int> pending_;                 // per bucket: tensors not yet ready
  std::vector<std::vector<size_t>> of_tensor_;  // tensor -> buckets it overlaps
  std::vector<std::unique_ptr<Request>> requests_;
  size_t launched_ = 0;
  bool overlap_ = true;
  ReducerStats last_;
};

// The bucket layout alone (tests and benchmarks use it too).
std::vector<Bucket> make_buckets(const std::vector<TensorSpan>& spans, size_t total, size_t elem_bytes,
                                 size_t first_bucket_bytes, size_t bucket_bytes);

}  // namespace amp
