// The linear layers' GEMMs of a model, one seam for both precisions: in the compute dtype, or,
// bound to the run's FP8 state (precision.compute fp8), on FP8 operands. In FP8 each layer has three
// FP8 tensors, the recipe of Transformer Engine's "hybrid" format:
//   NAME.input        E4M3, the layer's input x       (forward, and the weight gradient)
//   NAME.weight       E4M3, its weight w              (forward, and the input gradient)
//   NAME.grad_output  E5M2, the output's gradient dy  (both gradients)
// Each operand is quantized with its tensor's scale (fp8_quantize: cast to FP8 and back, exact in
// BF16, the amax recorded), and the compute-dtype GEMM with FP32 accumulation runs on the quantized
// values: what an FP8 GEMM with per-tensor scales computes, up to summation order. The bias and its
// gradient stay in the compute dtype (the bias gradient sums the unquantized dy, as Transformer
// Engine's fused cast-and-dbias does). Forward records the amaxes of x and w only when a training
// step is under way (record); backward always records dy's. Unbound (FP8 off, or an evaluation or
// sampling command without a training state), every call is the plain compute-dtype op.
// Native (Fp8Binding::native_gemm: the ops run FP8 GEMMs): for layers whose inputs, outputs and
// rows are multiples of 16, the operands become FP8 codes (ComputeOps::fp8_cast; the transposed
// codes for the products that reduce over rows: dy and x for dw, w for dx) and the three products
// run as ComputeOps::fp8_gemm with the scales' inverses; the same scratch holds codes and their
// transpose (2 bytes per element, as one BF16 copy). The values are the emulation's.
#pragma once

#include <string>
#include <vector>

#include "amp/fp8_scaling.h"
#include "backend/compute_ops.h"

namespace amp {

class LinearLayers {
 public:
  LinearLayers(ComputeOps& ops, DType compute) : ops_(ops), compute_(compute) {}

  // Declares a layer (NAME of its FP8 tensors); returns its id (declaration order).
  int add(const std::string& name);
  // The declared layers' FP8 tensors, three per layer in declaration order (index 3 id + 0, 1, 2).
  std::vector<Fp8Tensor> fp8_tensors() const;
  // Elements (compute dtype) of the three FP8 operand buffers for up to max_rows rows: inputs,
  // weights, output gradients, for layers of these {in, out} shapes.
  struct Scratch {
    size_t input = 0, weight = 0, grad_output = 0;
  };
  static Scratch scratch_elements(const std::vector<std::pair<size_t, size_t>>& shapes, size_t max_rows);
  // The model's buffers for the quantized operands (sized by scratch_elements), and the binding.
  void set_scratch(void* input, void* weight, void* grad_output) { qx_ = input, qw_ = weight, qdy_ = grad_output; }
  void bind(const Fp8Binding& b) { fp8_ = b; }
  bool fp8() const { return fp8_.scales != nullptr; }
  // Whether a layer of these widths at `rows` rows runs the native FP8 GEMMs.
  bool native(size_t rows, size_t in, size_t out) const {
    return fp8_.native_gemm && rows % 16 == 0 && in % 16 == 0 && out % 16 == 0;
  }

  // y = x w^T + b (ComputeOps::linear_forward).
  void forward(int id, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, bool record);
  // dw = dy^T x, db = sum of dy's rows; then backward_input may follow for the same layer.
  void backward_weight(int id, const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db);
  // dx = dy w (after backward_weight of the same layer and dy).
  void backward_input(int id, const Tensor& dy, const Tensor& w, const Tensor& dx);

 private:
  Tensor quantize(const Tensor& t, void* out, int tensor, bool record);
  void record_into(int tensor, bool record, int32_t** amax, int64_t** counts) const;
  // FP8 codes of t (codes and/or their transpose) with tensor's scale.
  void cast(const Tensor& t, uint8_t* codes, uint8_t* codes_t, int tensor, bool record);
  // C = A B^T / (scale_a scale_b) (+ bias) on FP8 codes of tensors ta and tb.
  void gemm(int64_t m, int64_t n, int64_t k, const uint8_t* a, int ta, const uint8_t* b, int tb, const void* bias,
            const Tensor& c);

  ComputeOps& ops_;
  DType compute_;
  std::vector<std::string> names_;
  Fp8Binding fp8_;
  void* qx_ = nullptr;
  void* qw_ = nullptr;
  void* qdy_ = nullptr;
  int qdy_layer_ = -1;  // the layer whose dy qdy_ holds (backward_weight -> backward_input)
  bool qdy_native_ = false;  // ... as FP8 codes
};

}  // namespace amp
