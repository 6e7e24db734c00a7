// row_sum's fixed summation order (backend/ops_args.h) on the CPU, shared by row_sum and the layer
// norm's dgamma/dbeta: every (segment, lane) pair has its own row of FP32 partials, which a work
// item fills by adding that lane's rows in increasing order; fold_segments then adds the lanes of
// each segment in lane order and the segments in segment order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/ops_args.h"
#include "core/aligned_vector.h"

namespace amp::cpu {

// Partials of a sum over `rows` rows of `cols` columns: [segments][kRowSumLanes][cols].
inline size_t row_sum_partials(int64_t rows, int64_t cols) {
  return size_t(row_sum_segments(rows) * kRowSumLanes * cols);
}

// The partial row that row `row` (counted from 0) adds to.
inline float* row_sum_lane(float* partial, int64_t row, int64_t cols) {
  const int64_t segment = row / kRowSumSegment, lane = (row % kRowSumSegment) % kRowSumLanes;
  return partial + (segment * kRowSumLanes + lane) * cols;
}

// out[j] = ((0 + q_0) + q_1) + ..., q_g = ((0 + p_g0) + p_g1) + ... + p_g15 (FP32, not rounded).
inline void fold_segments(const float* partial, int64_t rows, int64_t cols, float* out) {
  std::fill(out, out + cols, 0.0f);
  aligned_vector<float> q(static_cast<size_t>(cols));
  for (int64_t g = 0; g < row_sum_segments(rows); ++g) {
    std::fill(q.begin(), q.end(), 0.0f);
    for (int64_t l = 0; l < kRowSumLanes; ++l) {
      const float* p = partial + (g * kRowSumLanes + l) * cols;
      for (int64_t j = 0; j < cols; ++j) q[size_t(j)] += p[j];
    }
    for (int64_t j = 0; j < cols; ++j) out[j] += q[size_t(j)];
  }
}

}  // namespace amp::cpu
