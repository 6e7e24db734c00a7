#include "optim/state_bytes.h"

namespace amp {

int optimizer_moments(const OptimizerParams& p) {
  if (p.kind == OptimizerKind::AdamW) return 2;
  return p.momentum != 0.0f ? 1 : 0;
}

StateShape estimated_state_shape(size_t params, DType compute, const OptimizerParams& opt, int world, bool sharded,
                                 bool accumulate, size_t align) {
  StateShape s;
  s.params = s.flat = s.held = params;
  s.compute = compute;
  s.moments = optimizer_moments(opt);
  s.accumulate = accumulate;
  if (sharded && world > 1) {
    const size_t block = size_t(world) * align;
    const size_t blocks = params / block + (params % block != 0);
    s.sharded = true;
    s.flat = blocks * block;
    s.held = blocks * align;
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
  b.gradients = add(add(mul(s.flat, es), s.sharded ? mul(s.held, es) : 0),
                    add(mul(s.held, sizeof(float)), s.accumulate ? mul(s.params, sizeof(float)) : 0));
  add(add(b.masters, b.moments), add(b.working, b.gradients));  // total() fits
  return b;
}

}  // namespace amp
