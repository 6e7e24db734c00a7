// Sampling with a key/value cache (Gpt::decoder, gpt.h). A generation extends its context one
// token at a time; each block's qkv rows of the positions already seen are kept, so the next token
// runs one position through the blocks, its attention against every cached key:
//
//   scores[h] = q_h K_h^T      (q_rows x positions, FP32; batched over the heads)
//   P = causal softmax of the last q_rows rows (CausalSoftmaxArgs::q_rows), rounded to the dtype
//   att[:, h] = P_h V_h
//
// which is the explicit attention's math (model.attention explicit) for either attention path.
#include <algorithm>

#include "core/error.h"
#include "model/gpt.h"

namespace amp {

class GptDecoder final : public TokenDecoder {
 public:
  GptDecoder(Gpt& g, const void* params) : g_(g), params_(params) {
    const GptOptions& o = g.opt_;
    // Gpt::decoder_sizes' buffers: the model's (GptOptions::sampling), or allocated here.
    std::vector<char*> mine;
    if (g.decoder_.empty()) {
      std::vector<size_t> sizes;
      AMP_CHECK(Gpt::decoder_sizes(o, g.compute_, &sizes), "the GPT decoder's buffer sizes overflow");
      for (const size_t bytes : sizes) owned_.push_back(g.mem_.alloc(bytes));
      for (Buffer& b : owned_) mine.push_back(b.as<char>());
    } else {
      for (Buffer& b : g.decoder_) mine.push_back(b.as<char>());
    }
    b_.scores = mine[0], b_.probs = mine[1];
    for (size_t l = 0; l < o.n_layer; ++l)
      // With model.recompute every block shares one set of activations: the cache is its own.
      b_.kv.push_back(o.recompute ? mine[2 + l] : g.saved_[l].qkv.as<char>());  // max_rows x seq_len rows
    g.before_weights(0, g.lnf_w() + 1);  // an overlapped all-gather of the weights completes first
  }

  std::vector<float> next_logits(const std::vector<int32_t>& context) override {
    const size_t T = g_.opt_.seq_len;
    AMP_CHECK(!context.empty(), "next_logits: empty context");
    const size_t n = std::min(T, context.size());
    const std::vector<int32_t> window(context.end() - long(n), context.end());
    // The positions whose rows are cached: the common prefix with the last window (a window that
    // slid past seq_len shares none), and none if the model ran anything else since.
    if (forwards_ != g_.forwards_) cached_.clear();
    const size_t common = size_t(std::mismatch(window.begin(), window.end(), cached_.begin(), cached_.end()).first -
                                 window.begin());
    const size_t p0 = std::min(common, n - 1);  // the last position runs again for its logits
    cached_.clear();
    if (p0 == 0 && !g_.opt_.recompute) {
      // Nothing cached (a new prompt, a window that slid): the whole context's forward pass, whose
      // qkv rows land in the blocks' buffers, the cache (one sequence: position p at row p).
      g_.context_logits(params_, window);
    } else {
      g_.decode_positions(params_, window, p0, b_);
    }
    std::vector<float> logits = g_.download_logits(g_.logits_.data());
    cached_ = window;
    forwards_ = g_.forwards_;
    positions_ += n - p0;
    return logits;
  }
  size_t positions_run() const override { return positions_; }

 private:
  Gpt& g_;
  const void* params_;
  std::vector<Buffer> owned_;  // Gpt::decoder_sizes' buffers where the model has none
  Gpt::DecodeBuffers b_;
  std::vector<int32_t> cached_;  // the tokens of the cached positions
  uint64_t forwards_ = 0;
  size_t positions_ = 0;
};

std::unique_ptr<TokenDecoder> Gpt::decoder(const void* params) { return std::make_unique<GptDecoder>(*this, params); }

void Gpt::decode_positions(const void* params, const std::vector<int32_t>& window, size_t p0, const DecodeBuffers& b) {
  const size_t C = opt_.n_embd, H = opt_.n_head, D = C / H, L = opt_.n_layer, e = dtype_size(compute_);
  const size_t n = window.size();
  AMP_CHECK(p0 < n && n <= opt_.seq_len && b.kv.size() == L, "decode_positions: positions [", p0, ", ", n, ")");
  const size_t chunk = kSampleStep;
  for (size_t q0 = p0; q0 < n; q0 += chunk) {
    const size_t Tq = std::min(chunk, n - q0), Tk = q0 + Tq;
    mem_.upload(tokens_.data(), window.data() + q0, Tq * sizeof(int32_t));
    embed(params, 1, Tq, q0);
    for (size_t l = 0; l < L; ++l) {
      char* qkv = b.kv[l];  // [seq_len, 3C]: the chunk's rows from q0
      run_block(params, l, Tq, Tensor{qkv + q0 * 3 * C * e, compute_, Tq, 3 * C}, false, [&] {
        // Every head at once: head h's columns start h D elements into each part (q, k, v).
        ops_.gemm(gemm_of(GemmShape(Tq, Tk, D, H), GemmIn(qkv + q0 * 3 * C * e, 3 * C, D),
                          GemmIn(qkv + C * e, 3 * C, D).t(), GemmOut(b.scores, Tk, Tq * Tk), compute_, DType::F32));
        CausalSoftmaxArgs sm;
        sm.batch = int64_t(H), sm.T = int64_t(Tk), sm.q_rows = int64_t(Tq), sm.scale = scale_;
        sm.s = b.scores, sm.s_type = DType::F32, sm.p = b.probs, sm.p_type = compute_;
        ops_.causal_softmax_forward(sm);
        ops_.gemm(gemm_of(GemmShape(Tq, D, Tk, H), GemmIn(b.probs, Tk, Tq * Tk), GemmIn(qkv + 2 * C * e, 3 * C, D),
                          GemmOut(saved(l).att.data(), C, D), compute_, compute_));
      });
    }
  }
  position_logits(params, (n - 1 - p0) % chunk);  // the last position: its row in the last chunk
}

}  // namespace amp
