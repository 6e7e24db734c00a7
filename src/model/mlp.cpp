#include "model/mlp.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/rng.h"

namespace amp {

Mlp::Mlp(DeviceMemory& mem, ComputeOps& ops, MlpOptions opt, DType compute, size_t max_rows)
    : Model(max_rows), mem_(mem), ops_(ops), opt_(std::move(opt)), compute_(compute), max_rows_(max_rows),
      layout_(mlp_layout(opt_.dims)), lin_(ops, compute) {
  const std::vector<size_t>& dims = opt_.dims;
  AMP_CHECK(dims.size() >= 2, "an MLP needs inputs and outputs");
  auto make = [&](size_t cols) {
    store_.push_back(alloc_buffer(mem_, max_rows_ * cols * dtype_size(compute_)));
    return store_.back().tensor(compute_, max_rows_, cols);
  };
  const size_t L = dims.size() - 1;
  z_.resize(L + 1);
  a_.resize(L + 1);
  for (size_t l = 1; l <= L; ++l) {
    z_[l] = make(dims[l]);
    a_[l] = l < L ? make(dims[l]) : z_[l];  // the last layer has no activation
  }
  const size_t widest = *std::max_element(dims.begin(), dims.end());
  dlogits_ = make(dims.back());
  grad_a_ = make(widest);
  grad_b_ = make(widest);

  const size_t in = dims.front(), out = dims.back();
  x_host_.resize(max_rows_ * in);
  x_stage_ = alloc_buffer(mem_, max_rows_ * in * sizeof(float));
  if (compute_ != DType::F32) x_lp_ = alloc_buffer(mem_, max_rows_ * in * dtype_size(compute_));
  if (classification()) {
    labels_host_.resize(max_rows_);
    labels_ = alloc_buffer(mem_, max_rows_ * sizeof(int32_t));
  } else {
    targets_host_.resize(max_rows_ * out);
    targets_ = alloc_buffer(mem_, max_rows_ * out * sizeof(float));
  }
  for (size_t l = 1; l < dims.size(); ++l) lin_.add("fc" + std::to_string(l));
  if (opt_.fp8) {
    const LinearLayers::Scratch q = LinearLayers::scratch_elements(layer_shapes(dims), max_rows_);
    const size_t es = dtype_size(compute_);
    q_input_ = alloc_buffer(mem_, q.input * es);
    q_weight_ = alloc_buffer(mem_, q.weight * es);
    q_grad_output_ = alloc_buffer(mem_, q.grad_output * es);
    lin_.set_scratch(q_input_.data(), q_weight_.data(), q_grad_output_.data());
  }
}

std::vector<std::pair<size_t, size_t>> Mlp::layer_shapes(const std::vector<size_t>& dims) {
  std::vector<std::pair<size_t, size_t>> s;
  for (size_t i = 0; i + 1 < dims.size(); ++i) s.push_back({dims[i], dims[i + 1]});
  return s;
}

std::string Mlp::widths_text(const std::vector<size_t>& dims) {
  std::string widths;
  for (size_t d : dims) widths += (widths.empty() ? "" : "-") + std::to_string(d);
  return widths;
}

std::string Mlp::describe() const {
  return strcat("mlp ", widths_text(opt_.dims), " (", opt_.activation == Activation::Gelu ? "gelu" : "relu", ")");
}

bool Mlp::activation_bytes(const std::vector<size_t>& dims, size_t max_rows, DType compute, size_t* bytes_out,
                           bool fp8) {
  const size_t lp = dtype_size(compute);
  size_t widest = 0, activations = 0, largest_weight = 0;
  bool overflow = false;
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    size_t w = 0;
    overflow |= __builtin_mul_overflow(dims[i], dims[i + 1], &w);
    largest_weight = std::max(largest_weight, w);
  }
  for (size_t d : dims) {
    widest = std::max(widest, d);
    overflow |= __builtin_add_overflow(activations, d, &activations);
  }
  size_t bytes = 0, t = 0;
  // activations and their gradients (compute dtype), inputs (FP32 + compute dtype), FP32 scratch
  overflow |= __builtin_mul_overflow(max_rows, 2 * activations + 3 * widest, &t);
  overflow |= __builtin_mul_overflow(t, lp + 4, &bytes);
  // a weight widened to FP32 and its gradient (the linear layers' widening scratch)
  overflow |= __builtin_mul_overflow(largest_weight, size_t(8), &t);
  overflow |= __builtin_add_overflow(bytes, t, &bytes);
  if (fp8 && !overflow) {  // the quantized operands (the constructor's three buffers)
    const LinearLayers::Scratch q = LinearLayers::scratch_elements(layer_shapes(dims), max_rows);
    overflow |= __builtin_add_overflow(bytes, (q.input + q.weight + q.grad_output) * lp, &bytes);
  }
  *bytes_out = bytes;
  return !overflow;
}

std::vector<TensorInit> Mlp::init_recipe(uint64_t seed) const {
  std::vector<TensorInit> recipe;
  for (size_t i = 0; i < layout_.tensors.size(); ++i) {
    const size_t layer = i / 2;
    const bool is_bias = i % 2 == 1;
    const double fan_in = double(opt_.dims[layer]), fan_out = double(opt_.dims[layer + 1]);
    const uint64_t stream = mix_seed(seed, 0x1A1E5ull, i);
    if (opt_.init == "pytorch") {  // nn.Linear: weight and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))
      const double bound = 1.0 / std::sqrt(fan_in);
      recipe.push_back(TensorInit::uniform(-bound, bound, stream));
    } else if (is_bias) {
      recipe.push_back(TensorInit::constant(0.0));
    } else if (opt_.init == "xavier") {
      const double bound = std::sqrt(6.0 / (fan_in + fan_out));
      recipe.push_back(TensorInit::uniform(-bound, bound, stream));
    } else {
      recipe.push_back(TensorInit::normal(opt_.init_std, stream));
    }
  }
  return recipe;
}

Tensor Mlp::param(const void* base, int index) const {
  const ParamInfo& p = layout_.tensors[size_t(index)];
  return Tensor{static_cast<char*>(const_cast<void*>(base)) + p.span.offset * dtype_size(compute_), compute_, p.rows,
                p.cols};
}

void Mlp::stage(const Dataset& data, const uint32_t* idx, size_t first, size_t rows) {
  AMP_CHECK(rows <= max_rows_ && data.n_features == opt_.dims.front(), "Mlp::stage: bad batch");
  const size_t in = data.n_features, out = opt_.dims.back();
  if (idx) {  // gathered on the host, one upload each
    for (size_t i = 0; i < rows; ++i) {
      const size_t s = idx[i];
      std::memcpy(&x_host_[i * in], &data.x[s * in], in * sizeof(float));
      if (classification()) labels_host_[i] = data.labels[s];
      else std::memcpy(&targets_host_[i * out], &data.y[s * out], out * sizeof(float));
    }
    mem_.upload(x_stage_.data(), x_host_.data(), rows * in * sizeof(float));
    if (classification()) mem_.upload(labels_.data(), labels_host_.data(), rows * sizeof(int32_t));
    else mem_.upload(targets_.data(), targets_host_.data(), rows * out * sizeof(float));
    return;
  }
  mem_.upload(x_stage_.data(), &data.x[first * in], rows * in * sizeof(float));
  if (classification()) mem_.upload(labels_.data(), &data.labels[first], rows * sizeof(int32_t));
  else mem_.upload(targets_.data(), &data.y[first * out], rows * out * sizeof(float));
}

void Mlp::forward_loss(const void* params, size_t rows, const float* scale, float inv_count, bool with_grad,
                       LossSums sums) {
  const size_t in = opt_.dims.front(), out = opt_.dims.back();
  Tensor x = x_stage_.tensor(DType::F32, rows, in);
  if (compute_ != DType::F32) {
    ops_.cast(x_stage_.data(), DType::F32, x_lp_.data(), compute_, rows * in);
    x = x_lp_.tensor(compute_, rows, in);
  }
  const Tensor logits = forward(x, params, rows, with_grad);
  const Tensor dlogits = with_grad ? dlogits_.row_slice(0, rows) : Tensor{nullptr, compute_, rows, out};
  if (classification())
    ops_.softmax_xent(dense_xent_args(logits, labels_.as<int32_t>(), scale, inv_count, dlogits, sums.loss_sum, sums.correct));
  else
    ops_.mse(logits, targets_.tensor(DType::F32, rows, out), scale, inv_count, dlogits, sums.loss_sum);
}

Tensor Mlp::forward(const Tensor& x, const void* params, size_t batch, bool record) {
  const std::vector<size_t>& dims_ = opt_.dims;
  AMP_CHECK(batch <= max_rows_ && x.cols == dims_[0] && x.dtype == compute_, "Mlp::forward: bad input");
  const size_t L = dims_.size() - 1;
  Tensor in = x.row_slice(0, batch);
  for (size_t l = 1; l <= L; ++l) {
    const Tensor z = z_[l].row_slice(0, batch);
    before_weights(int(2 * (l - 1)), int(2 * (l - 1) + 1));
    lin_.forward(int(l - 1), in, param(params, int(2 * (l - 1))), param(params, int(2 * (l - 1) + 1)), z, record);
    if (l < L) ops_.activation_forward(opt_.activation, z, a_[l].row_slice(0, batch));
    in = a_[l].row_slice(0, batch);
  }
  a_[0] = x;  // kept for the first layer's weight gradient
  return z_[L].row_slice(0, batch);
}

void Mlp::backward(const void* params, void* grads, size_t batch, const std::function<void(int)>& on_ready) {
  const std::vector<size_t>& dims_ = opt_.dims;
  const size_t L = dims_.size() - 1;
  Tensor dz = dlogits_.row_slice(0, batch);
  Tensor* spare[2] = {&grad_a_, &grad_b_};
  int flip = 0;
  for (size_t l = L; l >= 1; --l) {
    const int wi = int(2 * (l - 1)), bi = wi + 1;
    const Tensor input = a_[l - 1].row_slice(0, batch);
    // Weight and bias gradients first, so their bucket can start reducing during the rest.
    before_grads(wi, bi);
    lin_.backward_weight(int(l - 1), dz, input, param(grads, wi), param(grads, bi));
    on_ready(wi);
    on_ready(bi);
    if (l == 1) break;
    const Tensor w = param(params, wi);
    Tensor da{spare[flip]->data, compute_, batch, dims_[l - 1]};
    lin_.backward_input(int(l - 1), dz, w, da);
    Tensor dz_prev{spare[flip]->data, compute_, batch, dims_[l - 1]};  // in place: dz = da * act'(z)
    ops_.activation_backward(opt_.activation, z_[l - 1].row_slice(0, batch), da, dz_prev);
    dz = dz_prev;
    flip ^= 1;
  }
}

}  // namespace amp
