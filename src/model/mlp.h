// A multi-layer perceptron, the first Model: Linear layers with an activation between them (none
// after the last), softmax cross-entropy (classification) or summed squared error (regression).
// Inputs are staged as FP32 and cast to the compute dtype inside the step; activations and their
// gradients are stored in the compute dtype, so FP16 underflow is as real here as on a GPU.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "backend/compute_ops.h"
#include "backend/memory.h"
#include "model/linear_layers.h"
#include "model/model.h"

namespace amp {

struct MlpOptions {
  std::vector<size_t> dims;  // {inputs, hidden..., outputs}
  Activation activation = Activation::Relu;
  std::string init = "pytorch";  // pytorch (U(+-1/sqrt(fan_in))), xavier, normal (std init_std)
  double init_std = 0.01;
  Task task = Task::Classification;
  bool fp8 = false;  // precision.compute fp8: FP8 operands in every layer's GEMMs (model/linear_layers.h)
};

class Mlp final : public Model {
 public:
  // Buffers are sized for max_rows samples.
  Mlp(DeviceMemory& mem, ComputeOps& ops, MlpOptions opt, DType compute, size_t max_rows);

  std::string describe() const override;
  const ParamLayout& layout() const override { return layout_; }
  std::vector<TensorInit> init_recipe(uint64_t seed) const override;
  size_t loss_terms_per_sample() const override { return classification() ? 1 : opt_.dims.back(); }
  bool classification() const override { return opt_.task == Task::Classification; }
  double uniform_loss() const override { return classification() ? std::log(double(opt_.dims.back())) : 0.0; }

  void stage(const Dataset& data, const uint32_t* idx, size_t first, size_t rows) override;
  void forward_loss(const void* params, size_t rows, const float* scale, float inv_count, bool with_grad,
                    LossSums sums) override;
  void backward(const void* params, void* grads, size_t rows, const std::function<void(int)>& ready) override;
  std::vector<Fp8Tensor> fp8_tensors() const override { return opt_.fp8 ? lin_.fp8_tensors() : std::vector<Fp8Tensor>{}; }
  void bind_fp8(const Fp8Binding& b) override {
    if (opt_.fp8) lin_.bind(b);
  }

  const std::vector<size_t>& dims() const { return opt_.dims; }
  // Backend bytes of the activations, inputs and scratch of a model of these widths at max_rows
  // (the parameters' training state: optim/state_bytes.h); false on overflow.
  static bool activation_bytes(const std::vector<size_t>& dims, size_t max_rows, DType compute, size_t* bytes,
                               bool fp8 = false);
  // "784-256-10": the widths as describe() and --dry-run print them.
  static std::string widths_text(const std::vector<size_t>& dims);

 private:
  Tensor param(const void* base, int index) const;
  Tensor forward(const Tensor& x, const void* params, size_t rows, bool record);
  static std::vector<std::pair<size_t, size_t>> layer_shapes(const std::vector<size_t>& dims);

  DeviceMemory& mem_;
  ComputeOps& ops_;
  MlpOptions opt_;
  DType compute_;
  size_t max_rows_;
  ParamLayout layout_;
  LinearLayers lin_;
  Buffer q_input_, q_weight_, q_grad_output_;  // FP8: the quantized operands (compute dtype)
  std::vector<Buffer> store_;            // owns the activation buffers
  std::vector<Tensor> z_, a_;            // pre-activations and outputs of each layer (a_[0] = input)
  Tensor dlogits_, grad_a_, grad_b_;     // gradient ping-pong buffers
  // Inputs: FP32 staging, its compute-dtype copy, labels or targets; host gathering buffers.
  Buffer x_stage_, x_lp_, labels_, targets_;
  std::vector<float> x_host_, targets_host_;
  std::vector<int32_t> labels_host_;
};

}  // namespace amp
