// CPU implementations of the backend operations (the references the CUDA kernels are tested
// against). OpenMP-parallel over fixed-size blocks; every reduction sums per-block partials in a
// fixed order, so results do not depend on the thread count.
#pragma once

#include <vector>

#include "backend/backend.h"

namespace amp::cpu {

constexpr size_t kBlock = 2048;  // elements per work block (fits the L1 cache as floats)

void activation_forward(Activation a, const Tensor& z, const Tensor& y);
void activation_backward(Activation a, const Tensor& z, const Tensor& dy, const Tensor& dz);
void bias_grad(const Tensor& dy, const Tensor& db);  // db[j] = sum_i dy[i][j] in FP32

// The batch's summed loss and hits (the caller adds them to a.loss_sum / a.correct); writes dlogits.
void softmax_xent(const SoftmaxXentArgs& a, double* loss_sum, int64_t* correct);
void mse(const Tensor& pred, const Tensor& target, float scale, float inv_count, const Tensor& dpred,
         double* loss_sum);

int32_t find_nonfinite(const void* grads, DType dtype, const std::vector<TensorSpan>& spans, size_t begin,
                       size_t end);  // 1 + first tensor index, 0 if all finite
// Returns 1 + first non-finite tensor (0 if none); writes out32; *norm_sq when non-null.
int32_t unscale_check(const void* grads, DType dtype, const std::vector<TensorSpan>& spans, float scale,
                      float* out32, double* norm_sq);
std::vector<GradStats> grad_stats(const void* grads, DType dtype, const std::vector<TensorSpan>& spans);

// Sum of squares of n floats (deterministic block order).
double sum_squares(const float* x, size_t n);

// out32 = float(grads) * (1 / scale) for n elements: unscale_check's values.
void unscale(const void* grads, DType dtype, size_t n, float scale, float* out32);
void optimizer_step(const OptimizerParams& p, const StepScalars& s, float* master, const float* g32,
                    float* state1, float* state2, size_t n, void* lp, DType lp_dtype);

}  // namespace amp::cpu
