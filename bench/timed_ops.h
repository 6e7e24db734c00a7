// A ComputeOps that times every call of the ops it forwards to, by kind (the GEMMs apart from the
// elementwise and normalization kernels), for the step benchmarks' "where the time goes" tables.
// Each call is timed from entry to return: the CPU backend's ops are synchronous; for a device
// whose ops only enqueue work, pass its memory and each call waits for the device before it
// returns (the time then includes a launch and a wait, some microseconds per call, and nothing
// overlaps). The overhead is two clock reads per call (a few hundred calls per step).
// The ops that are not GEMMs also count the bytes they must move: each input read and each output
// written once (a tensor both read and written, as an accumulated gradient, twice), the floor a
// copy of as many bytes sets for an op bound by memory (bench_gpt_step prints each op against it).
#pragma once

#include <chrono>
#include <map>
#include <string>

#include "backend/compute_ops.h"
#include "backend/memory.h"

namespace amp::bench {

class TimedOps final : public ComputeOps {
 public:
  explicit TimedOps(ComputeOps& inner, DeviceMemory* wait = nullptr) : in_(inner), wait_(wait) {}

  struct Total {
    double seconds = 0;
    size_t calls = 0;
    double bytes = 0;  // moved by the calls (0 for the GEMMs: their ceiling is the bare GEMM rate)
  };
  // Per op kind ("gemm", "gemm_batched", "linear_forward", "layernorm_backward", ...): time and calls since reset().
  const std::map<std::string, Total>& totals() const { return t_; }
  void reset() { t_.clear(); }
  // True for the kinds that are GEMMs (their time is the step's GEMM time).
  static bool is_gemm(const std::string& kind) { return kind.rfind("gemm", 0) == 0 || kind.rfind("linear_", 0) == 0; }

  void cast(const void* src, DType st, void* dst, DType dt, size_t n) override {
    timed("cast", [&] { in_.cast(src, st, dst, dt, n); }, double(n) * double(dtype_size(st) + dtype_size(dt)));
  }
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) override {
    timed("linear_forward", [&] { in_.linear_forward(x, w, b, y); });
  }
  void linear_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx) override {
    timed("linear_backward_input", [&] { in_.linear_backward_input(dy, w, dx); });
  }
  void linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) override {
    timed("linear_backward_weight", [&] { in_.linear_backward_weight(dy, x, dw, db); });
  }
  void fp8_quantize(const Fp8QuantizeArgs& a) override {
    timed("fp8_quantize", [&] { in_.fp8_quantize(a); });
  }
  void fp8_cast(const Fp8CastArgs& a) override {
    timed("fp8_cast", [&] { in_.fp8_cast(a); });
  }
  void fp8_gemm(const Fp8GemmArgs& g) override {
    timed("gemm_fp8", [&] { in_.fp8_gemm(g); });
  }
  bool native_fp8_gemm() const override { return in_.native_fp8_gemm(); }
  bool prefers_padded_gemm() const override { return in_.prefers_padded_gemm(); }
  void gemm(const GemmArgs& g) override {  // batched (attention) apart from single products
    timed(g.batch > 1 ? "gemm_batched" : "gemm", [&] { in_.gemm(g); });
  }
  void add(const AddArgs& a) override {
    timed("add", [&] { in_.add(a); }, double(a.n) * double(dtype_size(a.a_type) + dtype_size(a.b_type) + dtype_size(a.out_type)));
  }
  void row_sum(const RowSumArgs& r) override {
    timed("row_sum", [&] { in_.row_sum(r); }, double(r.rows * r.cols) * double(dtype_size(r.x_type)) + double(r.cols) * double(dtype_size(r.out_type)));
  }
  void layernorm_forward(const LayerNormArgs& a) override {
    timed("layernorm_forward", [&] { in_.layernorm_forward(a); }, layernorm_bytes(a));
  }
  void layernorm_backward(const LayerNormBackwardArgs& a) override {
    timed("layernorm_backward", [&] { in_.layernorm_backward(a); }, layernorm_bytes(a));
  }
  void causal_softmax_forward(const CausalSoftmaxArgs& a) override {
    timed("causal_softmax_forward", [&] { in_.causal_softmax_forward(a); },
          double(a.batch * a.rows() * a.T) * double(dtype_size(a.s_type) + dtype_size(a.p_type)));
  }
  void causal_softmax_backward(const CausalSoftmaxBackwardArgs& a) override {
    timed("causal_softmax_backward", [&] { in_.causal_softmax_backward(a); },
          double(a.batch * a.T * a.T) * double(dtype_size(a.p_type) + dtype_size(a.dp_type) + dtype_size(a.ds_type)));
  }
  void attention_forward(const AttentionArgs& a) override {
    timed("attention_forward", [&] { in_.attention_forward(a); },  // qkv in, out and the row statistics out
          double(a.B * a.T) * double(4 * a.H * a.D) * double(dtype_size(a.type)) + double(a.B * a.H * a.T) * 8.0);
  }
  void attention_backward(const AttentionBackwardArgs& a) override {
    timed("attention_backward", [&] { in_.attention_backward(a); },  // qkv, out, dout, the statistics in; dqkv, delta out
          double(a.B * a.T) * double(8 * a.H * a.D) * double(dtype_size(a.type)) + double(a.B * a.H * a.T) * 12.0);
  }
  void embedding_forward(const EmbeddingArgs& a) override {
    timed("embedding_forward", [&] { in_.embedding_forward(a); },  // a token and a position row in, a row out
          double(a.B * a.T) * (3.0 * double(a.C) * double(dtype_size(a.type)) + 4.0));
  }
  void embedding_backward(const EmbeddingBackwardArgs& a) override {
    timed("embedding_backward", [&] { in_.embedding_backward(a); },  // dx in, a token row read and written
          double(a.B * a.T) * (3.0 * double(a.C) * double(dtype_size(a.type)) + 4.0) +
              double(a.T * a.C) * double(dtype_size(a.type)));
  }
  void reserve_embedding(int64_t max_tokens, int64_t vocab) override { in_.reserve_embedding(max_tokens, vocab); }
  void activation_forward(Activation a, const Tensor& z, const Tensor& y) override {
    timed("activation_forward", [&] { in_.activation_forward(a, z, y); }, double(z.bytes() + y.bytes()));
  }
  void activation_backward(Activation a, const Tensor& z, const Tensor& dy, const Tensor& dz) override {
    timed("activation_backward", [&] { in_.activation_backward(a, z, dy, dz); },
          double(z.bytes() + dy.bytes() + dz.bytes()));
  }
  void softmax_xent(const SoftmaxXentArgs& a) override {
    timed("softmax_xent", [&] { in_.softmax_xent(a); },
          double(a.rows * a.classes) * double(dtype_size(a.logits_type) + (a.dlogits ? dtype_size(a.dlogits_type) : 0)));
  }
  void mse(const Tensor& pred, const Tensor& target, const float* scale, float inv_count, const Tensor& dpred,
           float* loss_sum) override {
    timed("mse", [&] { in_.mse(pred, target, scale, inv_count, dpred, loss_sum); });
  }

 private:
  static double layernorm_bytes(const LayerNormArgs& a) {  // x in, y out; gamma, beta; the row statistics out
    const double es = double(dtype_size(a.type));
    return double(a.rows * a.C) * 2.0 * es + double(a.C) * 2.0 * es + (a.mean ? double(a.rows) * 8.0 : 0.0);
  }
  static double layernorm_bytes(const LayerNormBackwardArgs& a) {  // dy, x, the statistics in; dx out (and in)
    const double es = double(dtype_size(a.type));
    return double(a.rows * a.C) * (a.accumulate_dx ? 4.0 : 3.0) * es + double(a.rows) * 8.0 +
           double(a.C) * (a.accumulate_dparams ? 5.0 : 3.0) * es;
  }

  template <typename F>
  void timed(const char* kind, F&& f, double bytes = 0) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    if (wait_) wait_->synchronize();
    Total& t = t_[kind];
    t.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++t.calls;
    t.bytes += bytes;
  }

  ComputeOps& in_;
  DeviceMemory* wait_;
  std::map<std::string, Total> t_;
};

}  // namespace amp::bench
