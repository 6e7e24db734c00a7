#include "optim/state_bytes.h"

#include <algorithm>

namespace amp {

int optimizer_moments(const OptimizerParams& p) {
  if (p.kind == OptimizerKind::AdamW) return 2;
  return p.momentum != 0.0f ? 1 : 0;
}

size_t unscale_chunk(size_t bucket_bytes) { return std::max<size_t>(bucket_bytes / sizeof(float), 1024); }

size_t unscale_pass(size_t chunk, size_t pass_elements) {
  return std::max<size_t>(pass_elements == 0 ? chunk : std::min(pass_elements, chunk), 1);
}

size_t stage2_window(const std::vector<TensorSpan>& spans, size_t flat, size_t bucket_elems, size_t page_elems) {
  size_t first = 0, second = 0;
  for (const TensorSpan& t : spans) {
    if (t.count > first) second = first, first = t.count;
    else if (t.count > second) second = t.count;
  }
  if (3 * bucket_elems + 4 * page_elems >= flat) return flat;
  const size_t w = first + second + 3 * bucket_elems + 4 * page_elems;  // each term is below flat
  return w < flat ? w : flat;
}

StateShape estimated_state_shape(size_t params, DType compute, const OptimizerParams& opt, int world, int zero,
                                 bool accumulate, size_t align, const std::vector<TensorSpan>& spans,
                                 size_t bucket_bytes) {
  const bool sharded = zero >= 1;
  StateShape s;
  s.params = s.flat = s.held = params;
  s.compute = compute;
  s.moments = optimizer_moments(opt);
  s.accumulate = accumulate;
  s.unscale_chunk = unscale_chunk(bucket_bytes);
  if (sharded && world > 1) {
    const size_t block = size_t(world) * align;
    const size_t blocks = params / block + (params % block != 0);
    s.sharded = true;
    s.flat = blocks * block;
    s.held = blocks * align;
    s.released = zero == 2;
    if (s.released)
      s.window = stage2_window(spans, s.flat, bucket_bytes / dtype_size(compute), kReleasePageBytes / dtype_size(compute));
  }
  return s;
}

StateBytes state_bytes(const StateShape& s) {
  StateBytes b;
  const size_t es = dtype_size(s.compute);
  const bool f32 = s.compute == DType::F32;
  auto mul = [&](size_t a, size_t k) {
    size_t r = 0;
    b.overflow |= __builtin_mul_overflow(a, k, &r);
    return r;
  };
  auto add = [&](size_t a, size_t k) {
    size_t r = 0;
    b.overflow |= __builtin_add_overflow(a, k, &r);
    return r;
  };
  b.masters = mul(f32 ? s.flat : s.held, sizeof(float));
  b.moments = mul(mul(size_t(s.moments), s.held), sizeof(float));
  b.working = f32 ? 0 : mul(s.flat, es);
  b.gradients = add(add(mul(s.released ? s.window : s.flat, es), s.sharded ? mul(s.held, es) : 0),
                    add(mul(std::min(s.held, s.unscale_chunk ? s.unscale_chunk : s.held), sizeof(float)), s.accumulate ? mul(s.params, sizeof(float)) : 0));
  add(add(b.masters, b.moments), add(b.working, b.gradients));  // total() fits
  return b;
}

}  // namespace amp
