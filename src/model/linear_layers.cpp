#include "model/linear_layers.h"

#include <algorithm>

#include "core/error.h"

namespace amp {

namespace {
enum Role { kInput = 0, kWeight = 1, kGradOutput = 2 };
}  // namespace

int LinearLayers::add(const std::string& name) {
  names_.push_back(name);
  return int(names_.size()) - 1;
}

std::vector<Fp8Tensor> LinearLayers::fp8_tensors() const {
  std::vector<Fp8Tensor> t;
  for (const std::string& n : names_) {
    t.push_back({n + ".input", Fp8::E4M3});
    t.push_back({n + ".weight", Fp8::E4M3});
    t.push_back({n + ".grad_output", Fp8::E5M2});
  }
  return t;
}

LinearLayers::Scratch LinearLayers::scratch_elements(const std::vector<std::pair<size_t, size_t>>& shapes,
                                                     size_t max_rows) {
  Scratch s;
  for (const auto& [in, out] : shapes) {
    s.input = std::max(s.input, max_rows * in);
    s.weight = std::max(s.weight, in * out);
    s.grad_output = std::max(s.grad_output, max_rows * out);
  }
  return s;
}

Tensor LinearLayers::quantize(const Tensor& t, void* out, int tensor, bool record) {
  Fp8QuantizeArgs a;
  a.src = t.data, a.src_type = t.dtype, a.dst = out, a.dst_type = t.dtype, a.n = int64_t(t.numel());
  a.format = tensor % 3 == kGradOutput ? Fp8::E5M2 : Fp8::E4M3;
  a.scale = fp8_.scales + tensor;
  a.amax = record && fp8_.amax ? fp8_.amax + tensor : nullptr;
  a.counts = record && fp8_.counts ? fp8_.counts + 3 * tensor : nullptr;
  ops_.fp8_quantize(a);
  return Tensor{out, t.dtype, t.rows, t.cols};
}

void LinearLayers::forward(int id, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, bool record) {
  if (!fp8()) return ops_.linear_forward(x, w, b, y);
  const Tensor qx = quantize(x, qx_, 3 * id + kInput, record);
  const Tensor qw = quantize(w, qw_, 3 * id + kWeight, record);
  ops_.linear_forward(qx, qw, b, y);
}

void LinearLayers::backward_weight(int id, const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) {
  if (!fp8()) return ops_.linear_backward_weight(dy, x, dw, db);
  // x with the scale its forward used (the scales move only after the step): the same values.
  const Tensor qdy = quantize(dy, qdy_, 3 * id + kGradOutput, true);
  const Tensor qx = quantize(x, qx_, 3 * id + kInput, false);
  qdy_layer_ = id;
  ops_.linear_backward_weight(qdy, qx, dw, db);
  // The bias gradient from the unquantized dy (row_sum's order, as the op's own).
  ops_.row_sum(RowSumArgs{dy.data, dy.dtype, int64_t(dy.rows), int64_t(dy.cols), int64_t(dy.cols), db.data, db.dtype});
}

void LinearLayers::backward_input(int id, const Tensor& dy, const Tensor& w, const Tensor& dx) {
  if (!fp8()) return ops_.linear_backward_input(dy, w, dx);
  AMP_CHECK(qdy_layer_ == id, "LinearLayers::backward_input(", names_[size_t(id)], ") without its backward_weight");
  qdy_layer_ = -1;
  const Tensor qw = quantize(w, qw_, 3 * id + kWeight, false);
  ops_.linear_backward_input(Tensor{qdy_, dy.dtype, dy.rows, dy.cols}, qw, dx);
}

}  // namespace amp
