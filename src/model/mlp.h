// A multi-layer perceptron on a Backend: Linear layers with an activation between them (none
// after the last). Parameters come from a flat low-precision working copy; gradients go to a flat
// buffer of the compute dtype in the same layout. Activations and their gradients are stored in
// the compute dtype, so FP16 underflow is as real here as on a GPU.
#pragma once

#include <functional>
#include <vector>

#include "backend/backend.h"
#include "model/param_layout.h"

namespace amp {

class Mlp {
 public:
  // dims = {inputs, hidden..., outputs}; buffers are sized for max_batch rows.
  Mlp(Backend& be, std::vector<size_t> dims, Activation act, DType compute, size_t max_batch);

  const ParamLayout& layout() const { return layout_; }
  const std::vector<size_t>& dims() const { return dims_; }
  DType compute() const { return compute_; }

  // The FP32 initial parameters (host), seeded; init is "pytorch", "xavier" or "normal".
  std::vector<float> init_params(const std::string& init, double init_std, uint64_t seed) const;

  // Forward pass of `batch` rows of x (compute dtype, batch x inputs). Returns the logits view.
  Tensor forward(const Tensor& x, const void* params, size_t batch);
  // Backward from dlogits (batch x outputs) down to the first layer's weight gradient. Calls
  // on_ready(t) as soon as the gradient of parameter tensor t is complete (last layer first).
  void backward(const Tensor& dlogits, const void* params, void* grads, size_t batch,
                const std::function<void(int)>& on_ready);

  // Buffer for the loss gradient w.r.t. the logits (batch x outputs, compute dtype).
  Tensor dlogits(size_t batch) const { return dlogits_.row_slice(0, batch); }

 private:
  Tensor param(const void* base, int index) const;

  Backend& be_;
  std::vector<size_t> dims_;
  Activation act_;
  DType compute_;
  size_t max_batch_;
  ParamLayout layout_;
  std::vector<Buffer> store_;            // owns the activation buffers
  std::vector<Tensor> z_, a_;            // pre-activations and outputs of each layer (a_[0] = input)
  Tensor dlogits_, grad_a_, grad_b_;     // gradient ping-pong buffers
};

}  // namespace amp
