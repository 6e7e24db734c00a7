#include "model/param_layout.h"

#include <algorithm>
#include <cmath>

namespace amp {

std::vector<TensorSpan> ParamLayout::spans() const {
  std::vector<TensorSpan> s;
  for (const auto& t : tensors) s.push_back(t.span);
  return s;
}

size_t ParamLayout::n_params() const {
  size_t n = 0;
  for (const auto& t : tensors) n += t.span.count;
  return n;
}

int ParamLayout::index_of(const std::string& name) const {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == name) return int(i);
  return -1;
}

std::string ParamLayout::names() const {
  std::string s;
  for (const auto& t : tensors) s += (s.empty() ? "" : ", ") + t.name;
  return s;
}

ParamLayout::NonFinite ParamLayout::first_non_finite(const float* values) const {
  return first_non_finite(values, 0, total);
}

ParamLayout::NonFinite ParamLayout::first_non_finite(const float* values, size_t begin, size_t count) const {
  for (const Slice& s : slices(begin, count))
    for (size_t e = 0; e < s.count; ++e) {
      const float v = values[s.at + e];
      if (!std::isfinite(v)) return NonFinite{int(s.tensor), s.first + e, v};
    }
  return NonFinite{};
}

std::vector<ParamLayout::Slice> ParamLayout::slices(size_t begin, size_t count) const {
  std::vector<Slice> out;
  const size_t end = begin + count;
  // The first tensor ending after begin (tensors lie in order).
  auto it = std::upper_bound(tensors.begin(), tensors.end(), begin,
                             [](size_t b, const ParamInfo& t) { return b < t.span.offset + t.span.count; });
  for (; it != tensors.end() && it->span.offset < end; ++it) {
    const size_t from = std::max(begin, it->span.offset), to = std::min(end, it->span.offset + it->span.count);
    if (from < to) out.push_back(Slice{size_t(it - tensors.begin()), from - it->span.offset, to - from, from - begin});
  }
  return out;
}

void ParamLayout::add(const std::string& name, size_t rows, size_t cols, bool decay) {
  tensors.push_back(ParamInfo{name, rows, cols, TensorSpan{total, rows * cols}, decay});
  total += (rows * cols + 31) / 32 * 32;
}

bool mlp_layout_fits(const std::vector<size_t>& dims) {
  size_t bound = 0;
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    size_t w = 0;
    if (__builtin_mul_overflow(dims[i] + 1, dims[i + 1], &w) || __builtin_add_overflow(bound, w + 64, &bound))
      return false;  // + up to 31 padding twice
  }
  return true;
}

ParamLayout mlp_layout(const std::vector<size_t>& dims) {
  ParamLayout l;
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    const std::string fc = "fc" + std::to_string(i + 1);
    l.add(fc + ".weight", dims[i + 1], dims[i], true);
    l.add(fc + ".bias", 1, dims[i + 1], false);
  }
  return l;
}

}  // namespace amp
