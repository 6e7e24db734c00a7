#include "model/linear_layers.h"

#include <algorithm>

#include "core/error.h"

namespace amp {

namespace {
enum Role { kInput = 0, kWeight = 1, kGradOutput = 2 };
Fp8 format_of(int tensor) { return tensor % 3 == kGradOutput ? Fp8::E5M2 : Fp8::E4M3; }
}  // namespace

// Where a cast of `tensor` records its amax and counts: nowhere outside a training step.
void LinearLayers::record_into(int tensor, bool record, int32_t** amax, int64_t** counts) const {
  *amax = record && fp8_.amax ? fp8_.amax + tensor : nullptr;
  *counts = record && fp8_.counts ? fp8_.counts + 3 * tensor : nullptr;
}

int LinearLayers::add(const std::string& name) {
  names_.push_back(name);
  return int(names_.size()) - 1;
}

std::vector<Fp8Tensor> LinearLayers::fp8_tensors() const {
  std::vector<Fp8Tensor> t;
  for (const std::string& n : names_) {
    t.push_back({n + ".input", format_of(kInput)});
    t.push_back({n + ".weight", format_of(kWeight)});
    t.push_back({n + ".grad_output", format_of(kGradOutput)});
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
  a.format = format_of(tensor), a.scale = fp8_.scales + tensor;
  record_into(tensor, record, &a.amax, &a.counts);
  ops_.fp8_quantize(a);
  return Tensor{out, t.dtype, t.rows, t.cols};
}

void LinearLayers::cast(const Tensor& t, uint8_t* codes, uint8_t* codes_t, int tensor, bool record) {
  Fp8CastArgs a;
  a.src = t.data, a.src_type = t.dtype, a.rows = int64_t(t.rows), a.cols = int64_t(t.cols);
  a.format = format_of(tensor), a.scale = fp8_.scales + tensor, a.codes = codes, a.codes_t = codes_t;
  record_into(tensor, record, &a.amax, &a.counts);
  ops_.fp8_cast(a);
}

void LinearLayers::gemm(int64_t m, int64_t n, int64_t k, const uint8_t* a, int ta, const uint8_t* b, int tb,
                        const void* bias, const Tensor& c) {
  Fp8GemmArgs g;
  g.m = m, g.n = n, g.k = k;
  g.a = a, g.a_format = format_of(ta);
  g.b = b, g.b_format = format_of(tb);
  g.a_scale = fp8_.scales + ta, g.b_scale = fp8_.scales + tb;
  g.a_inv_scale = fp8_.inv_scales + ta, g.b_inv_scale = fp8_.inv_scales + tb;
  g.bias = bias, g.c = c.data, g.c_type = c.dtype;
  ops_.fp8_gemm(g);
}

void LinearLayers::forward(int id, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, bool record) {
  if (!fp8()) return ops_.linear_forward(x, w, b, y);
  if (native(x.rows, x.cols, w.rows)) {  // y = x w^T + b: A = x (rows x in), B = w (out x in)
    auto* cx = static_cast<uint8_t*>(qx_);
    auto* cw = static_cast<uint8_t*>(qw_);
    cast(x, cx, nullptr, 3 * id + kInput, record);
    cast(w, cw, nullptr, 3 * id + kWeight, record);
    gemm(int64_t(x.rows), int64_t(w.rows), int64_t(x.cols), cx, 3 * id + kInput, cw, 3 * id + kWeight, b.data, y);
    return;
  }
  const Tensor qx = quantize(x, qx_, 3 * id + kInput, record);
  const Tensor qw = quantize(w, qw_, 3 * id + kWeight, record);
  ops_.linear_forward(qx, qw, b, y);
}

void LinearLayers::backward_weight(int id, const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) {
  if (!fp8()) return ops_.linear_backward_weight(dy, x, dw, db);
  if (fp8_.before_grad_cast) fp8_.before_grad_cast(3 * id + kGradOutput, dy.data, dy.dtype);
  const RowSumArgs bias_grad{dy.data, dy.dtype, int64_t(dy.rows), int64_t(dy.cols), int64_t(dy.cols), db.data, db.dtype};
  if (native(dy.rows, x.cols, dy.cols)) {  // dw = dy^T x: A = dy^T (out x rows), B = x^T (in x rows)
    const size_t rows = dy.rows;
    auto* cdy = static_cast<uint8_t*>(qdy_);
    uint8_t* cdy_t = cdy + rows * dy.cols;
    uint8_t* cx_t = static_cast<uint8_t*>(qx_) + rows * x.cols;
    cast(dy, cdy, cdy_t, 3 * id + kGradOutput, true);
    cast(x, nullptr, cx_t, 3 * id + kInput, false);
    gemm(int64_t(dy.cols), int64_t(x.cols), int64_t(rows), cdy_t, 3 * id + kGradOutput, cx_t, 3 * id + kInput, nullptr,
         dw);
    ops_.row_sum(bias_grad);
    qdy_layer_ = id, qdy_native_ = true;
    return;
  }
  // x with the scale its forward used (the scales move only after the step): the same values.
  const Tensor qdy = quantize(dy, qdy_, 3 * id + kGradOutput, true);
  const Tensor qx = quantize(x, qx_, 3 * id + kInput, false);
  qdy_layer_ = id, qdy_native_ = false;
  ops_.linear_backward_weight(qdy, qx, dw, db);
  // The bias gradient from the unquantized dy (row_sum's order, as the op's own).
  ops_.row_sum(bias_grad);
}

void LinearLayers::backward_input(int id, const Tensor& dy, const Tensor& w, const Tensor& dx) {
  if (!fp8()) return ops_.linear_backward_input(dy, w, dx);
  AMP_CHECK(qdy_layer_ == id, "LinearLayers::backward_input(", names_[size_t(id)], ") without its backward_weight");
  qdy_layer_ = -1;
  if (qdy_native_) {  // dx = dy w: A = dy (rows x out), B = w^T (in x out)
    uint8_t* cw_t = static_cast<uint8_t*>(qw_) + w.rows * w.cols;
    cast(w, nullptr, cw_t, 3 * id + kWeight, false);
    gemm(int64_t(dy.rows), int64_t(w.cols), int64_t(dy.cols), static_cast<const uint8_t*>(qdy_), 3 * id + kGradOutput,
         cw_t, 3 * id + kWeight, nullptr, dx);
    return;
  }
  const Tensor qw = quantize(w, qw_, 3 * id + kWeight, false);
  ops_.linear_backward_input(Tensor{qdy_, dy.dtype, dy.rows, dy.cols}, qw, dx);
}

}  // namespace amp
