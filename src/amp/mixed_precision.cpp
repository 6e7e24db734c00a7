#include "amp/mixed_precision.h"

#include "core/error.h"

namespace amp {

MixedPrecision::MixedPrecision(DeviceMemory& mem, AmpKernels& kernels, const ScalerParams& params, DType grad_dtype,
                               std::vector<TensorSpan> spans, std::vector<std::string> names, int rank, int world)
    : mem_(mem), k_(kernels), params_(params), grad_dtype_(grad_dtype), spans_(std::move(spans)),
      names_(std::move(names)), rank_(rank), world_(world) {
  AmpScalars init;
  init.scaler = scaler_init(params_);
  scalars_ = mem_.alloc(sizeof(AmpScalars));
  mem_.upload(scalars_.data(), &init, sizeof init);
  dev_ = scalars_.as<AmpScalars>();
  flag_words_ = OverflowFlags::count(world_);
  flags_ = mem_.alloc(flag_words_ * sizeof(int32_t));
  flags_dev_ = flags_.as<int32_t>();
}

void MixedPrecision::enable_fp8(const Fp8Params& params, std::vector<Fp8Tensor> tensors) {
  expect("enable_fp8()", {Phase::Idle});
  AMP_CHECK(!fp8_, "enable_fp8: already enabled");
  fp8_ = std::make_unique<Fp8State>(mem_, k_, params, std::move(tensors));
  flag_words_ = OverflowFlags::count(world_) + size_t(fp8_->count());
  flags_ = mem_.alloc(flag_words_ * sizeof(int32_t));
  flags_dev_ = flags_.as<int32_t>();
  mem_.zero(flags_dev_, flag_words_ * sizeof(int32_t));
}

Fp8Binding MixedPrecision::fp8_binding() {
  AMP_CHECK(fp8_, "fp8_binding: FP8 is not enabled");
  return fp8_->binding(flags_dev_ + OverflowFlags::count(world_));
}

namespace {

const char* phase_name(int p) {
  static const char* const names[] = {"before begin_step() (or after update())", "after begin_step()",
                                      "after unscale_and_check()", "after agree()", "after check_norm()"};
  return names[p];
}

}  // namespace

void MixedPrecision::expect(const char* verb, std::initializer_list<Phase> allowed) const {
  for (Phase p : allowed)
    if (p == phase_) return;
  throw Error(ErrorKind::Internal,
              strcat("mixed precision: ", verb, " called ", phase_name(int(phase_)),
                     "; a step calls begin_step, check_bucket (any number), unscale_and_check, agree, check_norm, "
                     "verdict (the optimizer), update, in this order"));
}

void MixedPrecision::expect(const char* verb, std::initializer_list<Phase> allowed, Phase next) {
  static_cast<const MixedPrecision&>(*this).expect(verb, allowed);
  phase_ = next;
}

void MixedPrecision::begin_step() {
  expect("begin_step()", {Phase::Idle}, Phase::Begun);
  mem_.zero(flags_dev_, flag_words_ * sizeof(int32_t));
}

void MixedPrecision::check_bucket(const void* grads, size_t begin, size_t end) {
  expect("check_bucket()", {Phase::Begun});
  k_.find_nonfinite(grads, grad_dtype_, spans_, begin, end, flags_dev_ + OverflowFlags::rank_slot(rank_));
}

void MixedPrecision::shard(std::vector<TensorSpan> shard_spans) {
  AMP_CHECK(shard_spans.size() == spans_.size(), "shard: ", shard_spans.size(), " spans for ", spans_.size(), " tensors");
  shard_spans_ = std::move(shard_spans);
  sharded_ = true;
}

void MixedPrecision::unscale_and_check(const void* grads) {
  expect("unscale_and_check()", {Phase::Begun}, Phase::Unscaled);
  if (!sharded_) {
    k_.unscale_check(grads, grad_dtype_, spans_, &dev_->scaler.scale, nullptr, flags_dev_, &dev_->norm_sq);
    return;
  }
  // This rank's partial norm² goes into its norm slots, in double (overflow_flags.h).
  k_.unscale_check(grads, grad_dtype_, shard_spans_, &dev_->scaler.scale, nullptr, flags_dev_, nullptr,
                   flags_dev_ + OverflowFlags::norm_slot(rank_, world_));
}

void MixedPrecision::unscale(const void* grads, size_t n, float* out32) const {
  expect("unscale()", {Phase::Checked});
  k_.unscale(grads, grad_dtype_, n, &dev_->scaler.scale, out32);
}

void MixedPrecision::agree(Communicator* comm) {
  expect("agree()", {Phase::Unscaled}, Phase::Agreed);
  if (comm && world_ > 1) comm->allreduce(BufView{flags_dev_, flag_words_, DType::I32}, ReduceOp::Max);
}

void MixedPrecision::check_norm(float max_norm) {
  expect("check_norm()", {Phase::Agreed}, Phase::Checked);
  if (sharded_) k_.sum_norm_partials(flags_dev_, world_, &dev_->norm_sq);
  if (max_norm > 0.0f) k_.check_norm(&dev_->norm_sq, max_norm, flags_dev_);
}

AmpVerdict MixedPrecision::verdict() const {
  expect("verdict()", {Phase::Checked});
  return AmpVerdict{flags_dev_, &dev_->norm_sq, &dev_->scaler};
}

void MixedPrecision::update() {
  expect("update()", {Phase::Checked}, Phase::Idle);
  k_.update_scale(&dev_->scaler, params_, flags_dev_, world_);
  if (fp8_) fp8_->update(flags_dev_ + OverflowFlags::count(world_), flags_dev_);
}

AmpScalars MixedPrecision::read() const {
  AmpScalars s;
  mem_.download(&s, dev_, sizeof s);
  return s;
}

std::vector<int32_t> MixedPrecision::read_flags() const {
  std::vector<int32_t> f(flag_words_);
  mem_.download(f.data(), flags_dev_, f.size() * sizeof(int32_t));
  return f;
}

void MixedPrecision::load(const ScalerState& s) {
  expect("load()", {Phase::Idle});
  mem_.upload(&dev_->scaler, &s, sizeof s);
}

std::string MixedPrecision::overflow_where(const ScalerState& s) const {
  const auto name = [&](int32_t t1) {
    return t1 > 0 && size_t(t1) <= names_.size() ? names_[size_t(t1 - 1)] : std::string("?");
  };
  if (s.last_overflow_tensor == OverflowFlags::kNormOverflow)
    return "the global gradient norm (every gradient finite, their norm beyond FP32, so grad_clip cannot clip)";
  if (s.last_overflow_rank >= 0) return strcat(name(s.last_overflow_rank_tensor), " on rank ", s.last_overflow_rank);
  if (world_ > 1) return strcat(name(s.last_overflow_tensor), " after the all-reduce (the 16-bit sum overflowed)");
  return name(s.last_overflow_tensor);
}

std::string MixedPrecision::skip_report(const ScalerState& before, const ScalerState& now) const {
  const int64_t new_skips = now.overflow_steps - before.overflow_steps;
  if (new_skips <= 0) return "";
  const std::string count = new_skips == 1 ? "" : strcat(" (", new_skips, " skipped since step ", before.iterations, ")");
  const std::string fp8 = fp8_ ? fp8_->nonfinite_operands() : std::string();
  return strcat("step ", now.last_overflow_iteration, ": non-finite gradients in ", overflow_where(now),
                fp8.empty() ? "" : " | ", fp8, " | step skipped on every rank | scale ", before.scale, " -> ",
                now.scale, count);
}

void MixedPrecision::check_divergence(const ScalerState& s, int64_t divergence_steps) const {
  if (s.overflow_at_min < divergence_steps) return;
  throw Error(ErrorKind::Divergence,
              strcat("divergence error: training diverged at step ", s.last_overflow_iteration,
                     ": gradients were non-finite for ", s.overflow_at_min,
                     " consecutive steps with the loss scale at its minimum (", s.scale, "); last in ", overflow_where(s),
                     ". Lower optimizer.lr", grad_dtype_ == DType::F16 ? ", enable optimizer.grad_clip, or use bf16"
                                                                        : " or enable optimizer.grad_clip"),
              true);
}

std::vector<GradStats> MixedPrecision::grad_stats(const void* grads) const {
  return k_.grad_stats(grads, grad_dtype_, spans_);
}

}  // namespace amp
