#include "amp/fp8_state.h"

#include <cstring>

#include "core/error.h"

namespace amp {

namespace {
size_t floats_before_meta(size_t n, size_t len) { return n * (3 + len); }  // scales | inverses | fmax | history
}  // namespace

Fp8State::Fp8State(DeviceMemory& mem, AmpKernels& kernels, const Fp8Params& params, std::vector<Fp8Tensor> tensors)
    : mem_(mem), k_(kernels), params_(params), tensors_(std::move(tensors)) {
  AMP_CHECK(params_.history >= 1 && !tensors_.empty(), "Fp8State: ", tensors_.size(), " tensors, history ",
            params_.history);
  const size_t n = tensors_.size(), len = size_t(params_.history);
  const size_t floats = floats_before_meta(n, len);
  state_ = mem_.alloc(floats * sizeof(float) + sizeof(Fp8Meta));
  std::vector<char> init(state_.bytes(), 0);
  float* f = reinterpret_cast<float*>(init.data());
  for (size_t t = 0; t < n; ++t) {
    f[t] = 1.0f;                                 // scales start at 1 (no history yet)
    f[n + t] = 1.0f;                             // and their inverses
    f[2 * n + t] = fp8_max(tensors_[t].format);  // the format's largest finite value
  }
  const Fp8Meta meta;
  std::memcpy(init.data() + floats * sizeof(float), &meta, sizeof meta);
  mem_.upload(state_.data(), init.data(), init.size());
  scales_ = state_.as<float>();
  inv_scales_ = scales_ + n;
  fmax_ = inv_scales_ + n;
  history_ = fmax_ + n;
  meta_ = reinterpret_cast<Fp8Meta*>(scales_ + floats);
  counts_ = mem_.alloc(3 * n * sizeof(int64_t));
  mem_.zero(counts_.data(), counts_.bytes());
  skipped_amax_ = mem_.alloc(n * sizeof(int32_t));
  mem_.zero(skipped_amax_.data(), skipped_amax_.bytes());
}

Fp8Binding Fp8State::binding(int32_t* amax_words) const {
  return Fp8Binding{scales_, inv_scales_, amax_words, counts_.as<int64_t>(), false, {}};
}

void Fp8State::update(const int32_t* amax_words, const int32_t* flags) {
  k_.fp8_update(scales_, fmax_, history_, meta_, amax_words, count(), params_, flags, inv_scales_,
                skipped_amax_.as<int32_t>());
}

Fp8State::Host Fp8State::read() const {
  const size_t n = tensors_.size(), len = size_t(params_.history);
  std::vector<char> raw(state_.bytes());
  mem_.download(raw.data(), state_.data(), raw.size());
  const float* f = reinterpret_cast<const float*>(raw.data());
  Host h;
  h.scales.assign(f, f + n);
  h.history.assign(f + 3 * n, f + 3 * n + n * len);
  std::memcpy(&h.meta, raw.data() + floats_before_meta(n, len) * sizeof(float), sizeof h.meta);
  return h;
}

void Fp8State::load(const Host& h) {
  const size_t n = tensors_.size(), len = size_t(params_.history);
  AMP_CHECK(h.scales.size() == n && h.history.size() == n * len, "Fp8State::load: sizes");
  mem_.upload(scales_, h.scales.data(), n * sizeof(float));
  std::vector<float> inv(n);
  for (size_t t = 0; t < n; ++t) inv[t] = 1.0f / h.scales[t];  // exact: powers of two
  mem_.upload(inv_scales_, inv.data(), n * sizeof(float));
  mem_.upload(history_, h.history.data(), n * len * sizeof(float));
  mem_.upload(meta_, &h.meta, sizeof h.meta);
}

std::vector<Fp8Counts> Fp8State::read_counts() const {
  std::vector<int64_t> c(3 * tensors_.size());
  mem_.download(c.data(), counts_.data(), c.size() * sizeof(int64_t));
  std::vector<Fp8Counts> out(tensors_.size());
  for (size_t t = 0; t < out.size(); ++t) out[t] = Fp8Counts{c[3 * t], c[3 * t + 1], c[3 * t + 2]};
  return out;
}

float Fp8State::newest_amax(const Host& h, int t) const {
  if (h.meta.newest < 0) return 0.0f;
  return h.history[size_t(t) * size_t(params_.history) + size_t(h.meta.newest)];
}

std::string Fp8State::nonfinite_operands() const {
  const int n = count();
  std::vector<int32_t> w(size_t(n), 0);
  mem_.download(w.data(), skipped_amax_.data(), w.size() * sizeof(int32_t));
  std::vector<int> order;  // the step's order of the casts
  for (int t = 0; t < n; ++t)
    if (tensors_[size_t(t)].format == Fp8::E4M3) order.push_back(t);
  for (int t = n - 1; t >= 0; --t)
    if (tensors_[size_t(t)].format == Fp8::E5M2) order.push_back(t);
  int first = -1, more = 0;
  for (int t : order) {
    if (!amax_nonfinite(w[size_t(t)])) continue;
    if (first < 0)
      first = t;
    else
      ++more;
  }
  if (first < 0) return "";
  const Fp8Tensor& f = tensors_[size_t(first)];
  return strcat("FP8 operand ", f.name, " (", fp8_name(f.format), ") not finite",
                more ? strcat(" (and ", more, " more)") : std::string());
}

}  // namespace amp
