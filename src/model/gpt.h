// A GPT-2 style decoder-only transformer, the second Model: token and learned position
// embeddings, pre-LayerNorm blocks of causal multi-head self-attention and a GELU (tanh) MLP of
// width 4 n_embd, a final LayerNorm and an LM head tied to the token embedding; cross-entropy over
// the vocabulary. Precision policy (docs/design.md): every GEMM, the two attention products
// included, on compute-dtype operands with FP32 accumulation; attention scores and their
// gradients, LayerNorm statistics, softmax, GELU and the cross-entropy in FP32; stored in the
// compute dtype (and so subject to FP16 underflow): the residual stream, LayerNorm outputs, q/k/v,
// attention probabilities, MLP activations, logits, and every activation gradient that feeds a
// GEMM (dlogits, the attention-score gradient dS, ...).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/compute_ops.h"
#include "backend/memory.h"
#include "model/linear_layers.h"
#include "model/model.h"

namespace amp {

struct GptOptions {
  size_t vocab = 256, seq_len = 64, n_layer = 2, n_head = 4, n_embd = 128;
  // The logits' rows are padded to a multiple of this (1: none): the LM head's three GEMMs get
  // aligned leading dimensions (llm.c pads GPT-2's 50257 to 50304). Only the row stride of the
  // logits and their gradient changes: the weights, the softmax, the loss and sampling see the
  // vocabulary alone.
  size_t vocab_pad = 1;
  // model.recompute block: only each block's input is kept for backward; a block's other
  // activations live in one set of buffers and are computed again, block by block, inside
  // backward (deterministic kernels: the same bits as when stored).
  bool recompute = false;
  // model.attention fused: the fused causal attention op (backend/attention_args.h), which keeps
  // two FP32 numbers per (row, head, position) instead of the [T, T] probabilities; explicit: two
  // batched GEMMs around the causal softmax (the reference).
  bool fused_attention = false;
  // precision.compute fp8: FP8 operands in the blocks' four linear layers (model/linear_layers.h);
  // the LM head (tied to the embedding) stays in the compute dtype, as in Transformer Engine's
  // recipes.
  bool fp8 = false;
  // The loss's LM head at the padded width (logits_ld() columns) through a padded copy of wte
  // (Gpt::head_), where the logits are padded and the backend's GEMMs prefer it
  // (ComputeOps::prefers_padded_gemm: a GPU). The same function either way.
  bool pad_head = false;
  // Text samples will be drawn (sample.tokens > 0): the decoder's buffers (decoder_sizes) are
  // allocated with the model's, so the memory plan and check count them. Without it a decoder
  // allocates them when it is made.
  bool sampling = false;
  // model.recompute mlp: the MLP's two activations (fc's output and GELU's, 8 n_embd per token of
  // a block's 16) live in one set of buffers for every block and are computed again (one linear
  // layer and GELU) inside backward, block by block. Implied by recompute (block).
  bool recompute_mlp = false;
  bool mlp_shared() const { return recompute || recompute_mlp; }
  // model.recompute attention (explicit attention only): no block keeps its attention
  // probabilities ([H, rows, T, T] each); each head's are computed again (its scores' GEMM and the
  // softmax) in one [rows, T, T] buffer, in forward and again in backward.
  bool recompute_attention = false;
  bool probs_kept() const { return !fused_attention && !recompute_attention; }
  bool padded_head() const { return pad_head && logits_ld() > vocab; }
  size_t logits_ld() const { return (vocab + vocab_pad - 1) / vocab_pad * vocab_pad; }
};

// model.vocab_pad's choice: the configured multiple, or (0) 128 for vocabularies above 256.
inline size_t vocab_pad_for(int64_t configured, size_t vocab) {
  return configured > 0 ? size_t(configured) : vocab > 256 ? 128 : 1;
}

// wte, wpe, then per layer ln_1, attn.qkv, attn.proj, ln_2, mlp.fc, mlp.proj (weight, bias each),
// then ln_f: the names of GPT-2's checkpoints ("h.3.attn.qkv.weight").
ParamLayout gpt_layout(const GptOptions& o);

class Gpt final : public Model {
 public:
  Gpt(DeviceMemory& mem, ComputeOps& ops, GptOptions opt, DType compute, size_t max_rows);

  std::string describe() const override;
  const ParamLayout& layout() const override { return layout_; }
  std::vector<TensorInit> init_recipe(uint64_t seed) const override;
  size_t loss_terms_per_sample() const override { return opt_.seq_len; }
  bool classification() const override { return false; }
  bool language_model() const override { return true; }
  double uniform_loss() const override { return std::log(double(opt_.vocab)); }
  const char* loss_name() const override { return "loss"; }
  const GptOptions& options() const { return opt_; }

  void stage(const Dataset& data, const uint32_t* idx, size_t first, size_t rows) override;
  void forward_loss(const void* params, size_t rows, const float* scale, float inv_count, bool with_grad,
                    LossSums sums) override;
  void backward(const void* params, void* grads, size_t rows, const std::function<void(int)>& ready) override;
  std::vector<Fp8Tensor> fp8_tensors() const override { return opt_.fp8 ? lin_.fp8_tensors() : std::vector<Fp8Tensor>{}; }
  void bind_fp8(const Fp8Binding& b) override {
    if (opt_.fp8) lin_.bind(b);
  }

  // Tokens and targets given directly (rows x seq_len each), as stage() gathers them from windows.
  void stage_tokens(const int32_t* tokens, const int32_t* targets, size_t rows);
  // The logits of the last forward pass (compute dtype, rows*seq_len x vocab with row stride
  // options().logits_ld(); backend memory).
  const void* logits_data() const { return logits_.data(); }

  // Text generation: the logits (FP32, host) of the next token after `context` (its last seq_len
  // tokens), from the working parameters.
  std::vector<float> next_logits(const void* params, const std::vector<int32_t>& context) override;
  // Sampling with a key/value cache (gpt_decoder.cpp): each block's qkv rows of the context's
  // positions are kept, and a longer context runs its new positions alone, their attention
  // against every cached key (the explicit path's math for either model.attention). A context
  // that is not an extension of the last one (a new prompt, or a window that slid past seq_len)
  // runs all its positions again, as next_logits does. Its logits agree with next_logits' within
  // the compute dtype's rounding (other GEMM shapes, and the explicit path's probabilities). The
  // cache is the blocks' own qkv buffers, or with model.recompute (one set of buffers for every
  // block) buffers of its own (decoder_sizes), whose positions then all run in chunks of
  // kSampleStep; with the attention's scratch for a chunk. Those buffers are the model's with
  // GptOptions::sampling, else the decoder allocates them.
  std::unique_ptr<TokenDecoder> decoder(const void* params) override;
  // The decoder's own buffers in allocation order: the attention's FP32 scores and probabilities
  // in the compute dtype for kSampleStep positions ([n_head, kSampleStep, seq_len] each), then
  // with model.recompute each block's cache of qkv rows ([seq_len, 3 n_embd]); false on overflow.
  static bool decoder_sizes(const GptOptions& o, DType compute, std::vector<size_t>* sizes);

  // Bytes of backend memory for the activations and their scratch at max_rows (the parameters'
  // training state: optim/state_bytes.h): the sum of buffer_sizes, what the constructor allocates;
  // false on overflow.
  static bool activation_bytes(const GptOptions& o, size_t max_rows, DType compute, size_t* bytes);
  // Every buffer's bytes in the constructor's allocation order; false when a size overflows.
  static bool buffer_sizes(const GptOptions& o, size_t max_rows, DType compute, std::vector<size_t>* sizes);

 private:
  enum Slot { kLn1W, kLn1B, kQkvW, kQkvB, kProjW, kProjB, kLn2W, kLn2B, kFcW, kFcB, kMProjW, kMProjB, kPerLayer };
  static constexpr int kWte = 0, kWpe = 1, kFirstLayer = 2;
  static constexpr size_t kSampleStep = 64;  // next_logits' positions: the context's, rounded up to this
  friend class GptDecoder;
  // The decoder's memory: block l's qkv rows of every position in kv[l] ([seq_len, 3C]), and the
  // attention's scratch for kSampleStep positions: FP32 scores and probabilities in the compute
  // dtype, [H, kSampleStep, seq_len] each.
  struct DecodeBuffers {
    std::vector<char*> kv;
    void* scores = nullptr;
    void* probs = nullptr;
  };
  // Positions [p0, window.size()) of the sequence `window` (kv rows [0, p0) read, the others
  // written), in chunks of kSampleStep positions: the logits of the last position into logits_'
  // first row. The same GEMM shapes whatever max_rows (the trainer's sample and the sample
  // command's agree).
  void decode_positions(const void* params, const std::vector<int32_t>& window, size_t p0, const DecodeBuffers& b);
  std::vector<float> download_logits(const void* row) const;  // one row of logits (compute dtype) -> FP32
  uint64_t forwards_ = 0;  // forward_blocks() calls: a decoder whose cache may have been overwritten starts again
  int layer_param(size_t l, int slot) const { return kFirstLayer + int(l) * kPerLayer + slot; }
  int lnf_w() const { return kFirstLayer + int(opt_.n_layer) * kPerLayer; }
  Tensor param(const void* base, int index) const;
  Tensor act(const Buffer& b, size_t rows, size_t cols) const { return b.tensor(compute_, rows, cols); }
  // rows sequences of T <= seq_len positions (training and evaluation: seq_len; sampling: the
  // context rounded up, kSampleStep). record: a training step's forward (the FP8 casts record their
  // amaxes). head: the LM head multiplies head_ (see there) at the padded width instead of wte.
  void forward(const void* params, size_t rows, size_t T, bool record, bool head);
  // forward's embedding and blocks: res_out_ holds the last block's output.
  void forward_blocks(const void* params, size_t rows, size_t T, bool record);
  // The logits of one position, res_out_'s row `row`: its final LayerNorm and wte (one row),
  // into logits_' first row (the decoder's LM head).
  void position_logits(const void* params, size_t row);
  // next_logits' whole-context pass without its LM head (the decoder's first call): the context's
  // last seq_len tokens, rounded up to kSampleStep positions, through the blocks, then
  // position_logits of its last position.
  void context_logits(const void* params, const std::vector<int32_t>& context);
  // Uploads the context's last seq_len tokens, rounded up to kSampleStep positions with token 0
  // (causal: the positions after the context do not reach it): its positions into *positions,
  // returns the context's.
  size_t stage_context(const std::vector<int32_t>& context, size_t* positions);
  bool padded_head() const { return opt_.padded_head(); }
  // Block l of rows sequences of T positions: res_in_[l] -> the next input.
  void forward_block(const void* params, size_t l, size_t rows, size_t T, bool record);
  // Block l over N positions, its qkv projection into `qkv` and `attention` writing saved(l).att
  // from it: the rest as forward_block (the decoder runs it with its own attention).
  void run_block(const void* params, size_t l, size_t N, const Tensor& qkv, bool record,
                 const std::function<void()>& attention);
  // The first block's input for positions [p0, p0 + T) of rows sequences (tokens_).
  void embed(const void* params, size_t rows, size_t T, size_t p0);
  // The blocks' linear layers, four per block in this order (their ids: 4 l + k).
  enum Linear { kQkv, kProj, kFc, kMProj, kLinearsPerLayer };
  int linear_id(size_t l, Linear k) const { return int(l) * kLinearsPerLayer + k; }
  static std::vector<std::pair<size_t, size_t>> linear_shapes(const GptOptions& o);
  void layernorm(const void* x, const void* params, int gamma, void* y, Buffer& mean, Buffer& rstd, size_t rows);
  void layernorm_backward(const void* dy, const void* x, const void* params, void* grads, int gamma,
                          const Buffer& mean, const Buffer& rstd, bool accumulate, size_t rows);

  DeviceMemory& mem_;
  ComputeOps& ops_;
  GptOptions opt_;
  DType compute_;
  size_t max_rows_;
  ParamLayout layout_;
  LinearLayers lin_;
  float scale_;  // 1 / sqrt(head_dim)

  // Inputs: token ids and targets (int32), staged per step; host gathering buffers.
  Buffer tokens_, targets_;
  std::vector<int32_t> tokens_host_, targets_host_, window_;  // window_: one window of T + 1 tokens
  // Each block's input (compute dtype), kept for backward; then what else backward needs of a
  // block (statistics FP32): per block, or one set shared by every block with recompute.
  std::vector<Buffer> res_in_;
  struct Saved {
    // attn_keep: what attention keeps for backward: the probabilities [H][rows][T][T] (explicit),
    // or the online softmax's row_max then row_sum, [rows, H, T] FP32 each (fused).
    Buffer ln1, mean1, rstd1, qkv, attn_keep, att, res_mid, ln2, mean2, rstd2, fc, gelu;
  };
  std::vector<Saved> saved_;
  Saved& saved(size_t l) { return saved_[opt_.recompute ? 0 : l]; }
  // Block l's fc and gelu buffers: the first set's with GptOptions::mlp_shared().
  Saved& mlp_saved(size_t l) { return saved_[opt_.mlp_shared() ? 0 : l]; }
  // Block l's MLP activations computed again from its ln2 (recompute mlp, inside backward).
  void forward_mlp(const void* params, size_t l, size_t rows, bool record);
  // The explicit attention from y.qkv into y.att, and its backward from dtmp_ into dqkv_.
  void attention_explicit(Saved& y, size_t rows, size_t T);
  // Head h's probabilities from y.qkv (its scores' GEMM, then the causal softmax) into where they
  // live (y.attn_keep, or probs_ with recompute attention); returns that place.
  char* head_probs(const Saved& y, size_t rows, size_t T, size_t h);
  void attention_explicit_backward(const Saved& y, size_t rows);
  Buffer res_out_, lnf_, meanf_, rstdf_, logits_, dlogits_;
  // With GptOptions::padded_head(): wte padded to logits_ld() rows [Vp, C] (compute dtype), so the
  // loss's LM head runs its three GEMMs at the padded width (a GPU's are several times faster
  // there: GPT-2's 50257 columns against 50304). forward_loss copies wte into its first V rows and
  // zeroes the rest; the backward multiplies it by dlogits (whose padding columns stay zero: the
  // cross-entropy never writes them) and then writes d(wte) over it, all Vp rows, and copies the
  // first V rows out.
  Buffer head_;
  // Scratch: attention scores / their gradient (FP32, one head; explicit) or the fused
  // backward's delta ([rows, H, T] FP32), gradient buffers.
  // probs_: one head's probabilities with recompute attention ([rows, T, T], compute dtype).
  Buffer scores_, dprobs_, dscores_, probs_, delta_, dres_, dtmp_, dqkv_, dfc_, tmp_;
  Buffer q_input_, q_weight_, q_grad_output_;  // FP8: the quantized operands (compute dtype)
  std::vector<Buffer> decoder_;  // GptOptions::sampling: decoder_sizes' buffers
};

}  // namespace amp
