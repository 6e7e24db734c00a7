// Where each parameter tensor lives in the flat parameter and gradient buffers. Tensors are in
// forward order (fc1.weight, fc1.bias, fc2.weight, ...), each starting on a 32-element boundary.
#pragma once

#include <string>
#include <vector>

#include "core/tensor_span.h"

namespace amp {

struct ParamInfo {
  std::string name;  // "fc2.weight"
  size_t rows = 0, cols = 0;
  TensorSpan span;
  // Optimizer attributes: weight decay applies (matrices and embeddings; not biases and norm
  // gains, unless optimizer.decay is all).
  bool decay = true;
};

struct ParamLayout {
  std::vector<ParamInfo> tensors;
  size_t total = 0;  // elements, padding included

  // Appends a tensor on the next 32-element boundary; decay: its optimizer attribute (matrices and
  // embeddings true, biases and norm gains false: the tensor's role, not its shape, since a weight
  // of one output row is still a matrix).
  void add(const std::string& name, size_t rows, size_t cols, bool decay);
  std::vector<TensorSpan> spans() const;
  size_t n_params() const;  // without padding
  int index_of(const std::string& name) const;  // -1 if absent
  std::string names() const;  // "fc1.weight, fc1.bias, ..." for messages
  // The first value of a tensor (in a flat buffer of `total` floats) that is not finite: tensor -1
  // when there is none. For weights read from a file: a training step would only skip on them, and
  // sampling or an evaluation would print nonsense.
  struct NonFinite {
    int tensor = -1;
    size_t element = 0;
    float value = 0;
  };
  NonFinite first_non_finite(const float* values) const;
  // The same among the elements [begin, begin + count) of the flat buffer, values pointing at begin's.
  NonFinite first_non_finite(const float* values, size_t begin, size_t count) const;

  // The parts of tensors among the flat buffer's elements [begin, begin + count), in order: the
  // tensor's elements [first, first + count) lie at position `at` of the range (what no slice
  // covers is alignment padding).
  struct Slice {
    size_t tensor = 0, first = 0, count = 0, at = 0;
  };
  std::vector<Slice> slices(size_t begin, size_t count) const;
};

// dims = {inputs, hidden..., outputs}.
ParamLayout mlp_layout(const std::vector<size_t>& dims);
// Whether mlp_layout(dims)'s element count fits size_t (an upper bound with every tensor's
// alignment padding, checked without overflowing): ask before making the layout.
bool mlp_layout_fits(const std::vector<size_t>& dims);

}  // namespace amp
