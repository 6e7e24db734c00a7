// Launchers of the CUDA kernels: the device twins of the CPU operations in
// src/backend/cpu/kernels.cpp, with the same semantics. All of them only enqueue work on the
// launch's stream (no host synchronization, no allocation), so a step made of them can be
// captured into a CUDA graph.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/amp_kernels.h"
#include "backend/compute_ops.h"

namespace amp::cuda {

struct SpanTable;

struct Launch {
  cudaStream_t stream = nullptr;
  unsigned max_blocks = 1;  // cap of grid-stride grids (a few waves of the device)
};

// Per-block partials of the loss reductions, reduced in a fixed order by a second kernel.
struct LossScratch {
  double* loss = nullptr;
  long long* hits = nullptr;
  unsigned capacity = 0;  // blocks
};

// ---- cast.cu
void cast(const Launch& l, const void* src, DType src_type, void* dst, DType dst_type, size_t n);

// ---- elementwise.cu
void activation_forward(const Launch& l, Activation a, const Tensor& z, const Tensor& y);
void activation_backward(const Launch& l, Activation a, const Tensor& z, const Tensor& dy, const Tensor& dz);
// y[r][c] = in[r][c] + b[c] in FP32, rounded once to y's dtype; in may be y itself.
void add_bias_rows(const Launch& l, const Tensor& b, const Tensor& in, const Tensor& y);

// ---- loss.cu
void softmax_xent(const Launch& l, const SoftmaxXentArgs& a, const LossScratch& scratch);
void mse(const Launch& l, const Tensor& pred, const Tensor& target, const float* scale, float inv_count,
         const Tensor& dpred, float* loss_sum, const LossScratch& scratch);

// ---- amp_pass.cu
void find_nonfinite(const Launch& l, const void* grads, DType dtype, const SpanTable& t, int32_t* flag);
void unscale_check(const Launch& l, const void* grads, DType dtype, const SpanTable& t, const float* scale,
                   float* out32, int32_t* flags, float* norm_sq, int32_t* norm_bits);
void grad_stats_chunks(const Launch& l, const void* grads, DType dtype, const SpanTable& t);  // -> t.stats
void unscale(const Launch& l, const void* grads, DType dtype, size_t n, const float* scale, float* out32);

// ---- optimizer.cu
void optimizer_step(const Launch& l, const OptimizerParams& p, const float* lr, float max_norm, float* master,
                    const float* g32, float* state1, float* state2, size_t n, void* lp, DType lp_dtype,
                    const int32_t* flags, const float* norm_sq, const ScalerState* scaler);

// ---- scaler.cu
void check_norm(const Launch& l, const float* norm_sq, float max_norm, int32_t* flags);
void sum_norm_partials(const Launch& l, const int32_t* flags, int world, float* norm_sq);
void update_scale(const Launch& l, ScalerState* state, const ScalerParams& params, const int32_t* flags, int world);

// ---- ops_fp8.cu
void fp8_quantize(const Launch& l, const Fp8QuantizeArgs& a);
void fp8_update(const Launch& l, float* scales, const float* fmax, float* history, Fp8Meta* meta,
                const int32_t* amax_words, int n, const Fp8Params& p, const int32_t* flags, float* inv_scales,
                int32_t* skipped_amax);
void fp8_cast(const Launch& l, const Fp8CastArgs& a);

}  // namespace amp::cuda
