#include "model/mlp.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"

namespace amp {

Mlp::Mlp(Backend& be, std::vector<size_t> dims, Activation act, DType compute, size_t max_batch)
    : be_(be), dims_(std::move(dims)), act_(act), compute_(compute), max_batch_(max_batch),
      layout_(mlp_layout(dims_)) {
  AMP_CHECK(dims_.size() >= 2, "an MLP needs inputs and outputs");
  auto make = [&](size_t cols) {
    store_.push_back(be_.alloc(max_batch_ * cols * dtype_size(compute_)));
    return store_.back().tensor(compute_, max_batch_, cols);
  };
  const size_t L = dims_.size() - 1;
  z_.resize(L + 1);
  a_.resize(L + 1);
  for (size_t l = 1; l <= L; ++l) {
    z_[l] = make(dims_[l]);
    a_[l] = l < L ? make(dims_[l]) : z_[l];  // the last layer has no activation
  }
  const size_t widest = *std::max_element(dims_.begin(), dims_.end());
  dlogits_ = make(dims_.back());
  grad_a_ = make(widest);
  grad_b_ = make(widest);
}

std::vector<float> Mlp::init_params(const std::string& init, double init_std, uint64_t seed) const {
  std::vector<float> w(layout_.total, 0.0f);
  for (size_t i = 0; i < layout_.tensors.size(); ++i) {
    const ParamInfo& p = layout_.tensors[i];
    const size_t layer = i / 2;
    const bool is_bias = i % 2 == 1;
    const double fan_in = double(dims_[layer]), fan_out = double(dims_[layer + 1]);
    Rng rng(mix_seed(seed, 0x1A1E5ull, i));
    float* out = w.data() + p.span.offset;
    for (size_t j = 0; j < p.span.count; ++j) {
      double v = 0.0;
      if (init == "pytorch") {  // nn.Linear: weight and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))
        const double bound = 1.0 / std::sqrt(fan_in);
        v = rng.uniform(-bound, bound);
      } else if (is_bias) {
        v = 0.0;
      } else if (init == "xavier") {
        const double bound = std::sqrt(6.0 / (fan_in + fan_out));
        v = rng.uniform(-bound, bound);
      } else {
        v = init_std * rng.normal();
      }
      out[j] = float(v);
    }
  }
  return w;
}

Tensor Mlp::param(const void* base, int index) const {
  const ParamInfo& p = layout_.tensors[size_t(index)];
  return Tensor{static_cast<char*>(const_cast<void*>(base)) + p.span.offset * dtype_size(compute_), compute_, p.rows,
                p.cols};
}

Tensor Mlp::forward(const Tensor& x, const void* params, size_t batch) {
  AMP_CHECK(batch <= max_batch_ && x.cols == dims_[0] && x.dtype == compute_, "Mlp::forward: bad input");
  const size_t L = dims_.size() - 1;
  Tensor in = x.row_slice(0, batch);
  for (size_t l = 1; l <= L; ++l) {
    const Tensor z = z_[l].row_slice(0, batch);
    be_.linear_forward(in, param(params, int(2 * (l - 1))), param(params, int(2 * (l - 1) + 1)), z);
    if (l < L) be_.activation_forward(act_, z, a_[l].row_slice(0, batch));
    in = a_[l].row_slice(0, batch);
  }
  a_[0] = x;  // kept for the first layer's weight gradient
  return z_[L].row_slice(0, batch);
}

void Mlp::backward(const Tensor& dlogits, const void* params, void* grads, size_t batch,
                   const std::function<void(int)>& on_ready) {
  const size_t L = dims_.size() - 1;
  Tensor dz = dlogits.row_slice(0, batch);
  Tensor* spare[2] = {&grad_a_, &grad_b_};
  int flip = 0;
  for (size_t l = L; l >= 1; --l) {
    const int wi = int(2 * (l - 1)), bi = wi + 1;
    const Tensor input = a_[l - 1].row_slice(0, batch);
    // Weight and bias gradients first, so their bucket can start reducing during the rest.
    be_.linear_backward_weight(dz, input, param(grads, wi), param(grads, bi));
    on_ready(wi);
    on_ready(bi);
    if (l == 1) break;
    const Tensor w = param(params, wi);
    Tensor da{spare[flip]->data, compute_, batch, dims_[l - 1]};
    be_.linear_backward_input(dz, w, da);
    Tensor dz_prev{spare[flip]->data, compute_, batch, dims_[l - 1]};  // in place: dz = da * act'(z)
    be_.activation_backward(act_, z_[l - 1].row_slice(0, batch), da, dz_prev);
    dz = dz_prev;
    flip ^= 1;
  }
}

}  // namespace amp
