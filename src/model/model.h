// The model seam: what the trainer needs of a network, whatever its family. A model owns its
// parameter layout (names, shapes, where each tensor lies in the flat buffers), its input and
// activation buffers (backend memory, sized for max_rows samples), and its loss. The trainer owns
// the parameters themselves (FP32 masters, the 16-bit working copy, the gradients) and passes the
// flat buffers in. One step is:
//
//   stage(data, idx, rows)                 host -> backend copy of the batch (outside a capture)
//   forward_loss(params, rows, scale, ...) forward, loss sums, and the loss-scaled output gradient
//   backward(params, grads, rows, ready)   gradients, calling ready(t) as each tensor completes
//
// Evaluation is stage + forward_loss without the gradient. The models: the MLP (mlp.h) and the
// GPT (gpt.h), built by make_model (make_model.h) from model.type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "amp/fp8_scaling.h"
#include "backend/memory.h"
#include "core/error.h"
#include "data/dataset.h"
#include "model/param_layout.h"
#include "model/weight_pieces.h"

namespace amp {

// Where forward_loss accumulates (backend memory).
struct LossSums {
  float* loss_sum = nullptr;   // summed per-sample losses
  int32_t* correct = nullptr;  // classification hits (unused by regression losses)
};

// One generation's state of a language model: next_logits(context) gives the logits (FP32, host)
// of the token after `context` (its last context-length tokens), reusing what it computed for the
// earlier contexts this one extends (the GPT's key/value cache), so a generated token costs one
// position's forward pass instead of the context's. Valid while the parameters it was made with
// keep their values: a trainer makes one per sample.
class TokenDecoder {
 public:
  virtual ~TokenDecoder() = default;
  virtual std::vector<float> next_logits(const std::vector<int32_t>& context) = 0;
  // The positions it has run through the model so far (a context that extends the last one by a
  // token runs one).
  virtual size_t positions_run() const = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual std::string describe() const = 0;  // "mlp 784-1024-1024-10 (relu)"
  virtual const ParamLayout& layout() const = 0;
  // How each tensor of layout() starts, seeded (GeneratedWeights makes the values a piece at a time).
  virtual std::vector<TensorInit> init_recipe(uint64_t seed) const = 0;
  // The FP32 initial parameters whole (host, layout().total elements): the recipe's values.
  std::vector<float> init_params(uint64_t seed) const {
    GeneratedWeights w(layout(), init_recipe(seed));
    return read_all(w, layout().total);
  }
  // What the model allocated in backend memory (activations, inputs, scratch), the bytes as they
  // were allocated, for max_rows() samples per forward pass.
  size_t buffer_bytes() const { return buffer_bytes_; }
  size_t max_rows() const { return buffer_rows_; }

  // Loss terms per sample (1 for cross-entropy, outputs for a summed squared error): the mean
  // loss divides the sums by samples x this.
  virtual size_t loss_terms_per_sample() const = 0;
  virtual bool classification() const = 0;
  // A language model: its samples are windows of tokens, each token a loss term (tokens/s).
  virtual bool language_model() const { return false; }
  // The cross-entropy of predicting every class (token) alike, ln(classes): the yardstick of the
  // divergence check (run.max_loss_vs_uniform); 0 for a regression loss, which has none.
  virtual double uniform_loss() const { return 0.0; }
  // Language models generate: the logits (FP32, host) of the token after `context` (its last
  // context-length tokens) from the working parameters `params`, each call a forward pass over the
  // whole context (the reference of decoder()'s). Others throw.
  virtual std::vector<float> next_logits(const void* /*params*/, const std::vector<int32_t>& /*context*/) {
    throw Error(ErrorKind::Internal, strcat("next_logits: ", describe(), " is not a language model"));
  }
  // A generation's decoder over the working parameters `params` (see TokenDecoder). Others throw.
  virtual std::unique_ptr<TokenDecoder> decoder(const void* /*params*/) {
    throw Error(ErrorKind::Internal, strcat("decoder: ", describe(), " is not a language model"));
  }
  // The name of the evaluation metric of loss(): "loss" (cross-entropy), "mse".
  virtual const char* loss_name() const { return classification() ? "loss" : "mse"; }

  // Copies `rows` samples of `data` into the input buffers: samples idx[0..rows) when idx is
  // non-null, else the contiguous samples [first, first + rows). Host work plus uploads.
  virtual void stage(const Dataset& data, const uint32_t* idx, size_t first, size_t rows) = 0;
  // Forward over the staged rows from the working parameters `params` (compute dtype, flat), adding
  // the summed loss (and hits) to `sums`. With with_grad, the output gradient receives the gradient
  // of loss x (*scale) x inv_count (the loss scale times the mean's 1/N), for backward().
  virtual void forward_loss(const void* params, size_t rows, const float* scale, float inv_count, bool with_grad,
                            LossSums sums) = 0;
  // Backward from the output gradient of the last forward_loss(with_grad), writing the flat
  // gradient buffer (compute dtype). Calls ready(t) as soon as tensor t's gradient is complete.
  virtual void backward(const void* params, void* grads, size_t rows, const std::function<void(int)>& ready) = 0;

  // precision.compute fp8: the model's FP8 tensors (empty when built without FP8), and where their
  // casts read scales and record amaxes (the training state's, amp::MixedPrecision::fp8_binding).
  // Unbound, a model built for FP8 computes its linear layers in the compute dtype (BF16).
  virtual std::vector<Fp8Tensor> fp8_tensors() const { return {}; }
  virtual void bind_fp8(const Fp8Binding& /*binding*/) {}

  // Called by every forward pass (training, evaluation, sampling) before a layer reads its weights,
  // tensors [first, last] of the layout, in forward order: the training step waits there for those
  // weights' all-gather when it overlaps the next forward pass (distributed.zero with overlap).
  void set_weights_hook(std::function<void(int first, int last)> hook) { weights_hook_ = std::move(hook); }
  // Called by backward() before it writes the gradients of tensors [first, last] of the layout (a
  // layer's weight and bias, as backward reaches them); every tensor's gradient is announced so
  // before its first write: distributed.zero 2 brings the memory it returned back there
  // (DeviceMemory::commit), no earlier, so that a device holds little more than the tensors in work.
  void set_grads_hook(std::function<void(int first, int last)> hook) { grads_hook_ = std::move(hook); }

 protected:
  explicit Model(size_t max_rows) : buffer_rows_(max_rows) {}
  void before_weights(int first, int last) const {
    if (weights_hook_) weights_hook_(first, last);
  }
  void before_grads(int first, int last) const {
    if (grads_hook_) grads_hook_(first, last);
  }
  // Every buffer of a model comes from here, so buffer_bytes() is what it holds.
  Buffer alloc_buffer(DeviceMemory& mem, size_t bytes) {
    buffer_bytes_ += bytes;
    return mem.alloc(bytes);
  }

 private:
  size_t buffer_bytes_ = 0, buffer_rows_ = 0;
  std::function<void(int, int)> weights_hook_, grads_hook_;
};

}  // namespace amp
