#include "model/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>

#include "core/convert.h"
#include "core/error.h"
#include "core/rng.h"

namespace amp {

namespace {

constexpr double kInitStd = 0.02;  // GPT-2's initialization

}  // namespace

ParamLayout gpt_layout(const GptOptions& o) {
  ParamLayout l;
  // Matrices and embeddings decay; biases and LayerNorm gains do not (nanoGPT's dim >= 2 rule).
  auto matrix = [&](const std::string& name, size_t rows, size_t cols) { l.add(name, rows, cols, true); };
  auto vector = [&](const std::string& name, size_t n) { l.add(name, 1, n, false); };
  const size_t C = o.n_embd;
  matrix("wte.weight", o.vocab, C);
  matrix("wpe.weight", o.seq_len, C);
  for (size_t i = 0; i < o.n_layer; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    vector(h + "ln_1.weight", C);
    vector(h + "ln_1.bias", C);
    matrix(h + "attn.qkv.weight", 3 * C, C);
    vector(h + "attn.qkv.bias", 3 * C);
    matrix(h + "attn.proj.weight", C, C);
    vector(h + "attn.proj.bias", C);
    vector(h + "ln_2.weight", C);
    vector(h + "ln_2.bias", C);
    matrix(h + "mlp.fc.weight", 4 * C, C);
    vector(h + "mlp.fc.bias", 4 * C);
    matrix(h + "mlp.proj.weight", C, 4 * C);
    vector(h + "mlp.proj.bias", C);
  }
  vector("ln_f.weight", C);
  vector("ln_f.bias", C);
  return l;
}

namespace {

// Appends the product of `factors` (a buffer's bytes) to sizes; true if it overflowed.
bool push_size(std::vector<size_t>* sizes, std::initializer_list<size_t> factors) {
  size_t b = 1;
  bool overflow = false;
  for (const size_t f : factors) overflow |= __builtin_mul_overflow(b, f, &b);
  sizes->push_back(b);
  return overflow;
}

}  // namespace

// The one list of the model's buffers: the constructor allocates exactly these, in this order,
// and activation_bytes() (the memory plan of --dry-run and of make_model's check) is their sum.
bool Gpt::buffer_sizes(const GptOptions& o, size_t rows, DType compute, std::vector<size_t>* out) {
  const size_t e = dtype_size(compute), C = o.n_embd, T = o.seq_len, H = o.n_head, Vp = o.logits_ld();
  bool overflow = false;
  const auto add = [&](std::initializer_list<size_t> factors) { overflow |= push_size(out, factors); };
  size_t N = 0;
  overflow |= __builtin_mul_overflow(rows, T, &N);
  add({N, 4}), add({N, 4});                             // tokens, targets (int32)
  for (size_t l = 0; l < o.n_layer; ++l) add({N, C, e});  // each block's input
  for (size_t l = 0; l < (o.recompute ? 1 : o.n_layer); ++l) {
    add({N, C, e}), add({N, 4}), add({N, 4});           // ln1, mean1, rstd1
    add({N, 3, C, e});                                  // qkv
    if (o.fused_attention) add({2, N, H, 4});           // row_max, row_sum [rows, H, T] FP32
    else if (o.probs_kept()) add({rows, H, T, T, e});   // probabilities [H][rows][T][T]
    add({N, C, e}), add({N, C, e});                     // att, res_mid
    add({N, C, e}), add({N, 4}), add({N, 4});           // ln2, mean2, rstd2
    if (l == 0 || !o.mlp_shared()) add({N, 4, C, e}), add({N, 4, C, e});  // fc, gelu
  }
  add({N, C, e}), add({N, C, e}), add({N, 4}), add({N, 4});  // res_out, lnf, meanf, rstdf
  add({N, Vp, e}), add({N, Vp, e});                     // logits, dlogits (rows Vp apart)
  if (o.padded_head()) add({Vp, C, e});                  // head_: wte padded to Vp rows
  if (o.fused_attention) {
    add({N, H, 4});  // the backward's delta [rows, H, T] FP32
  } else {  // one head at a time over every row (see forward): rows x T x T each
    add({rows, T, T, 4}), add({rows, T, T, 4}), add({rows, T, T, e});  // scores, dprobs (FP32), dscores
    if (o.recompute_attention) add({rows, T, T, e});                    // one head's probabilities
  }
  add({N, C, e}), add({N, C, e}), add({N, C, e});       // dres, dtmp, tmp
  add({N, 3, C, e}), add({N, 4, C, e});                 // dqkv, dfc
  if (o.fp8) {  // the linear layers' quantized operands: inputs, weights, output gradients
    const LinearLayers::Scratch q = LinearLayers::scratch_elements(linear_shapes(o), 1);
    add({N, q.input, e}), add({q.weight, e}), add({N, q.grad_output, e});
  }
  if (o.sampling) overflow |= !decoder_sizes(o, compute, out);
  return !overflow;
}

bool Gpt::decoder_sizes(const GptOptions& o, DType compute, std::vector<size_t>* out) {
  const size_t e = dtype_size(compute), C = o.n_embd, T = o.seq_len, H = o.n_head;
  bool overflow = false;
  const auto add = [&](std::initializer_list<size_t> factors) { overflow |= push_size(out, factors); };
  add({H, kSampleStep, T, 4}), add({H, kSampleStep, T, e});  // scores, probabilities
  if (o.recompute)
    for (size_t l = 0; l < o.n_layer; ++l) add({T, 3, C, e});  // each block's qkv rows
  return !overflow;
}

std::vector<std::pair<size_t, size_t>> Gpt::linear_shapes(const GptOptions& o) {
  const size_t C = o.n_embd;
  return {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};  // qkv, attn.proj, mlp.fc, mlp.proj
}

bool Gpt::activation_bytes(const GptOptions& o, size_t max_rows, DType compute, size_t* bytes_out) {
  std::vector<size_t> sizes;
  bool ok = buffer_sizes(o, max_rows, compute, &sizes);
  size_t bytes = 0;
  for (const size_t b : sizes) ok = ok && !__builtin_add_overflow(bytes, b, &bytes);
  *bytes_out = bytes;
  return ok;
}

Gpt::Gpt(DeviceMemory& mem, ComputeOps& ops, GptOptions opt, DType compute, size_t max_rows)
    : Model(max_rows), mem_(mem), ops_(ops), opt_(opt), compute_(compute), max_rows_(max_rows), layout_(gpt_layout(opt)),
      lin_(ops, compute) {
  AMP_CHECK(opt_.n_head > 0 && opt_.n_embd % opt_.n_head == 0, "n_embd must be a multiple of n_head");
  AMP_CHECK(opt_.n_layer > 0, "a GPT needs at least one layer");
  AMP_CHECK(opt_.vocab_pad > 0, "vocab_pad must be at least 1");
  scale_ = float(1.0 / std::sqrt(double(opt_.n_embd / opt_.n_head)));
  const size_t N = max_rows_ * opt_.seq_len, V = opt_.vocab;
  std::vector<size_t> sizes;
  AMP_CHECK(buffer_sizes(opt_, max_rows_, compute_, &sizes), "the GPT's buffer sizes overflow (make_model refuses such models)");
  size_t k = 0;
  const auto next = [&] { return alloc_buffer(mem_, sizes.at(k++)); };  // in buffer_sizes' order
  tokens_ = next();
  targets_ = next();
  tokens_host_.resize(N);
  targets_host_.resize(N);
  for (size_t l = 0; l < opt_.n_layer; ++l) res_in_.push_back(next());
  saved_.resize(opt_.recompute ? 1 : opt_.n_layer);
  for (Saved& l : saved_) {
    l.ln1 = next(), l.mean1 = next(), l.rstd1 = next();
    l.qkv = next();
    if (opt_.fused_attention || opt_.probs_kept()) l.attn_keep = next();
    l.att = next(), l.res_mid = next();
    l.ln2 = next(), l.mean2 = next(), l.rstd2 = next();
    if (&l == &saved_[0] || !opt_.mlp_shared()) l.fc = next(), l.gelu = next();
  }
  res_out_ = next(), lnf_ = next(), meanf_ = next(), rstdf_ = next();
  logits_ = next(), dlogits_ = next();
  // The padding columns of dlogits stay zero from the allocation (DeviceMemory's contract): the
  // cross-entropy writes the vocabulary's only, so they add nothing to the padded head's products.
  if (padded_head()) head_ = next();
  if (opt_.fused_attention) delta_ = next();
  else scores_ = next(), dprobs_ = next(), dscores_ = next();
  if (!opt_.fused_attention && opt_.recompute_attention) probs_ = next();
  dres_ = next(), dtmp_ = next(), tmp_ = next();
  dqkv_ = next(), dfc_ = next();
  if (opt_.fp8) {
    q_input_ = next(), q_weight_ = next(), q_grad_output_ = next();
    lin_.set_scratch(q_input_.data(), q_weight_.data(), q_grad_output_.data());
  }
  while (k < sizes.size()) decoder_.push_back(next());  // GptOptions::sampling
  AMP_CHECK(k == sizes.size(), "every planned buffer allocated");
  for (size_t l = 0; l < opt_.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    for (const char* name : {"attn.qkv", "attn.proj", "mlp.fc", "mlp.proj"}) lin_.add(h + name);
  }
  ops_.reserve_embedding(int64_t(N), int64_t(V));  // the embedding backward's scratch (outside any capture)
}

std::string Gpt::describe() const {
  return strcat("gpt ", opt_.n_layer, " layers x ", opt_.n_head, " heads x ", opt_.n_embd, ", seq ", opt_.seq_len,
                ", vocab ", opt_.vocab);  // the padded logits are not part of the model (scaling_model.py reads this)
}

std::vector<TensorInit> Gpt::init_recipe(uint64_t seed) const {
  std::vector<TensorInit> recipe;
  const double proj_std = kInitStd / std::sqrt(2.0 * double(opt_.n_layer));  // residual projections
  for (size_t i = 0; i < layout_.tensors.size(); ++i) {
    const std::string& name = layout_.tensors[i].name;
    const bool ln_gain = name.find("ln_") != std::string::npos && name.find(".weight") != std::string::npos;
    const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    const bool residual = name.find("attn.proj.weight") != std::string::npos || name.find("mlp.proj.weight") != std::string::npos;
    recipe.push_back(ln_gain ? TensorInit::constant(1.0)
                     : bias  ? TensorInit::constant(0.0)
                             : TensorInit::normal(residual ? proj_std : kInitStd, mix_seed(seed, 0x6E7ull, i)));
  }
  return recipe;
}

Tensor Gpt::param(const void* base, int index) const {
  const ParamInfo& p = layout_.tensors[size_t(index)];
  return Tensor{static_cast<char*>(const_cast<void*>(base)) + p.span.offset * dtype_size(compute_), compute_, p.rows,
                p.cols};
}

void Gpt::stage(const Dataset& data, const uint32_t* idx, size_t first, size_t rows) {
  const size_t T = opt_.seq_len;
  AMP_CHECK(rows <= max_rows_ && data.seq_len == T, "Gpt::stage: bad batch");
  window_.resize(T + 1);
  for (size_t r = 0; r < rows; ++r) {
    data.copy_window(idx ? idx[r] : first + r, window_.data());
    std::memcpy(&tokens_host_[r * T], window_.data(), T * sizeof(int32_t));
    std::memcpy(&targets_host_[r * T], window_.data() + 1, T * sizeof(int32_t));
  }
  stage_tokens(tokens_host_.data(), targets_host_.data(), rows);
}

void Gpt::stage_tokens(const int32_t* tokens, const int32_t* targets, size_t rows) {
  AMP_CHECK(rows <= max_rows_, "Gpt::stage_tokens: more rows than the buffers hold");
  const size_t T = opt_.seq_len;
  for (size_t i = 0; i < rows * T; ++i)
    AMP_CHECK(tokens[i] >= 0 && size_t(tokens[i]) < opt_.vocab && targets[i] >= 0 && size_t(targets[i]) < opt_.vocab,
              "token ", i, " outside the vocabulary");
  mem_.upload(tokens_.data(), tokens, rows * T * sizeof(int32_t));
  mem_.upload(targets_.data(), targets, rows * T * sizeof(int32_t));
}

void Gpt::layernorm(const void* x, const void* params, int gamma, void* y, Buffer& mean, Buffer& rstd, size_t rows) {
  LayerNormArgs a;
  a.rows = int64_t(rows), a.C = int64_t(opt_.n_embd), a.type = compute_, a.x = x;
  a.gamma = param(params, gamma).data, a.beta = param(params, gamma + 1).data, a.y = y;
  a.mean = mean.as<float>(), a.rstd = rstd.as<float>();
  ops_.layernorm_forward(a);
}

// dres (the residual stream's gradient) receives the input gradient: accumulated onto it inside a
// block (the residual path), written at the final LayerNorm.
void Gpt::layernorm_backward(const void* dy, const void* x, const void* params, void* grads, int gamma,
                             const Buffer& mean, const Buffer& rstd, bool accumulate, size_t rows) {
  LayerNormBackwardArgs a;
  a.rows = int64_t(rows), a.C = int64_t(opt_.n_embd), a.type = compute_, a.dy = dy, a.x = x;
  a.gamma = param(params, gamma).data, a.mean = mean.as<float>(), a.rstd = rstd.as<float>();
  a.dx = dres_.data(), a.accumulate_dx = accumulate;
  a.dgamma = param(grads, gamma).data, a.dbeta = param(grads, gamma + 1).data;
  ops_.layernorm_backward(a);
}

// The explicit attention (model.attention: explicit): one head at a time, each GEMM batched over
// the rows (sequences): the head's Q, K and V columns of qkv repeat every T x 3C elements;
// probabilities are stored [H][rows][T][T] (or, with recompute attention, one head's at a time).
char* Gpt::head_probs(const Saved& y, size_t rows, size_t T, size_t h) {
  const size_t C = opt_.n_embd, D = C / opt_.n_head, e = dtype_size(compute_);
  const int64_t B = int64_t(rows), qs = int64_t(T * 3 * C), tt = int64_t(T * T);
  const char* q = y.qkv.as<char>() + h * D * e;
  char* probs = opt_.probs_kept() ? y.attn_keep.as<char>() + h * rows * T * T * e : probs_.as<char>();
  // scores[b] = Q_h K_h^T (FP32); the 1/sqrt(D) is applied inside the softmax.
  ops_.gemm(gemm_of(GemmShape(T, T, D, B), GemmIn(q, 3 * C, qs), GemmIn(q + C * e, 3 * C, qs).t(),
                    GemmOut(scores_.data(), T, tt), compute_, DType::F32));
  CausalSoftmaxArgs sm;
  sm.batch = B, sm.T = int64_t(T), sm.scale = scale_, sm.s = scores_.data(), sm.s_type = DType::F32;
  sm.p = probs, sm.p_type = compute_;
  ops_.causal_softmax_forward(sm);
  return probs;
}

void Gpt::attention_explicit(Saved& y, size_t rows, size_t T) {
  const size_t C = opt_.n_embd, H = opt_.n_head, D = C / H;
  const size_t e = dtype_size(compute_);
  const int64_t B = int64_t(rows), qs = int64_t(T * 3 * C), tt = int64_t(T * T);
  for (size_t h = 0; h < H; ++h) {
    const char* q = y.qkv.as<char>() + h * D * e;
    const char* probs = head_probs(y, rows, T, h);
    // att[:, h] = P_h V_h, the heads side by side in C columns.
    ops_.gemm(gemm_of(GemmShape(T, D, T, B), GemmIn(probs, T, tt), GemmIn(q + 2 * C * e, 3 * C, qs),
                      GemmOut(y.att.as<char>() + h * D * e, C, T * C), compute_, compute_));
  }
}

// One block: res_in_[l] -> the next block's input (res_out_ after the last), its activations into
// saved(l). Backward calls it again for a block whose activations were not kept (recompute).
void Gpt::forward_block(const void* params, size_t l, size_t rows, size_t T, bool record) {
  const size_t C = opt_.n_embd, H = opt_.n_head, D = C / H, N = rows * T;
  Saved& y = saved(l);
  run_block(params, l, N, act(y.qkv, N, 3 * C), record, [&] {
    if (opt_.fused_attention) {
      AttentionArgs a;
      a.B = int64_t(rows), a.T = int64_t(T), a.H = int64_t(H), a.D = int64_t(D), a.scale = scale_, a.type = compute_;
      a.qkv = y.qkv.data(), a.out = y.att.data();
      a.row_max = y.attn_keep.as<float>(), a.row_sum = y.attn_keep.as<float>() + N * H;
      ops_.attention_forward(a);
    } else {
      attention_explicit(y, rows, T);
    }
  });
}

void Gpt::run_block(const void* params, size_t l, size_t N, const Tensor& qkv, bool record,
                    const std::function<void()>& attention) {
  const size_t C = opt_.n_embd, L = opt_.n_layer;
  Saved& y = saved(l);
  const Buffer& next = l + 1 < L ? res_in_[l + 1] : res_out_;
  layernorm(res_in_[l].data(), params, layer_param(l, kLn1W), y.ln1.data(), y.mean1, y.rstd1, N);
  lin_.forward(linear_id(l, kQkv), act(y.ln1, N, C), param(params, layer_param(l, kQkvW)),
               param(params, layer_param(l, kQkvB)), qkv, record);
  attention();
  lin_.forward(linear_id(l, kProj), act(y.att, N, C), param(params, layer_param(l, kProjW)),
               param(params, layer_param(l, kProjB)), act(tmp_, N, C), record);
  ops_.add(AddArgs{res_in_[l].data(), compute_, tmp_.data(), compute_, y.res_mid.data(), compute_, int64_t(N * C)});
  layernorm(y.res_mid.data(), params, layer_param(l, kLn2W), y.ln2.data(), y.mean2, y.rstd2, N);
  forward_mlp(params, l, N, record);
  const Saved& m = mlp_saved(l);
  lin_.forward(linear_id(l, kMProj), act(m.gelu, N, 4 * C), param(params, layer_param(l, kMProjW)),
               param(params, layer_param(l, kMProjB)), act(tmp_, N, C), record);
  ops_.add(AddArgs{y.res_mid.data(), compute_, tmp_.data(), compute_, next.data(), compute_, int64_t(N * C)});
}

// The first block's input for positions [p0, p0 + T) of rows sequences (tokens_): token and
// position embeddings, wpe read from its row p0.
void Gpt::embed(const void* params, size_t rows, size_t T, size_t p0) {
  const size_t C = opt_.n_embd;
  EmbeddingArgs emb;
  emb.B = int64_t(rows), emb.T = int64_t(T), emb.C = int64_t(C), emb.vocab = int64_t(opt_.vocab);
  emb.max_positions = int64_t(opt_.seq_len - p0), emb.type = compute_, emb.tokens = tokens_.as<int32_t>();
  emb.wte = param(params, kWte).data;
  emb.wpe = static_cast<const char*>(param(params, kWpe).data) + p0 * C * dtype_size(compute_);
  emb.x = res_in_[0].data();
  ops_.embedding_forward(emb);
}

// fc = ln2 W_fc^T + b_fc, gelu = GELU(fc) for N positions of block l.
void Gpt::forward_mlp(const void* params, size_t l, size_t N, bool record) {
  const size_t C = opt_.n_embd;
  Saved& m = mlp_saved(l);
  lin_.forward(linear_id(l, kFc), act(saved(l).ln2, N, C), param(params, layer_param(l, kFcW)),
               param(params, layer_param(l, kFcB)), act(m.fc, N, 4 * C), record);
  ops_.activation_forward(Activation::GeluTanh, act(m.fc, N, 4 * C), act(m.gelu, N, 4 * C));
}

void Gpt::forward(const void* params, size_t rows, size_t T, bool record, bool head) {
  const size_t C = opt_.n_embd, N = rows * T, V = opt_.vocab;
  forward_blocks(params, rows, T, record);
  before_weights(lnf_w(), lnf_w() + 1);  // ln_f; the LM head is the embedding's (waited for above)
  layernorm(res_out_.data(), params, lnf_w(), lnf_.data(), meanf_, rstdf_, N);
  // The LM head, tied to the token embedding: logits = lnf wte^T, rows Vp apart; padded, all Vp
  // columns from head_ (the padding columns are lnf 0 = 0).
  const size_t Vp = opt_.logits_ld(), e = dtype_size(compute_);
  const void* w = param(params, kWte).data;
  if (head) {
    ops_.cast(w, compute_, head_.data(), compute_, V * C);  // a copy
    mem_.zero(head_.as<char>() + V * C * e, (Vp - V) * C * e);
    w = head_.data();
  }
  ops_.gemm(gemm_of(GemmShape(N, head ? Vp : V, C), GemmIn(lnf_.data(), C), GemmIn(w, C).t(),
                    GemmOut(logits_.data(), Vp), compute_, compute_));
}

void Gpt::forward_blocks(const void* params, size_t rows, size_t T, bool record) {
  ++forwards_;
  before_weights(kWte, kWpe);
  embed(params, rows, T, 0);
  for (size_t l = 0; l < opt_.n_layer; ++l) {
    before_weights(layer_param(l, 0), layer_param(l, kPerLayer - 1));
    forward_block(params, l, rows, T, record);
  }
}

void Gpt::forward_loss(const void* params, size_t rows, const float* scale, float inv_count, bool with_grad,
                       LossSums sums) {
  forward(params, rows, opt_.seq_len, with_grad, padded_head());
  SoftmaxXentArgs x;
  x.logits = logits_.data(), x.logits_type = compute_, x.rows = int64_t(rows * opt_.seq_len);
  x.classes = int64_t(opt_.vocab), x.ld_logits = int64_t(opt_.logits_ld());
  x.labels = targets_.as<int32_t>(), x.scale = scale, x.inv_count = inv_count;
  x.dlogits = with_grad ? dlogits_.data() : nullptr, x.dlogits_type = compute_, x.ld_dlogits = x.ld_logits;
  x.loss_sum = sums.loss_sum, x.correct = sums.correct;
  ops_.softmax_xent(x);
}

// The explicit attention's backward: one head at a time, batched over the rows, as its forward
// (with recompute attention each head's probabilities computed again first); d(att) is in dtmp_,
// d(qkv) goes to dqkv_.
void Gpt::attention_explicit_backward(const Saved& y, size_t rows) {
  const size_t T = opt_.seq_len, C = opt_.n_embd, H = opt_.n_head, D = C / H;
  const size_t e = dtype_size(compute_);
  const int64_t B = int64_t(rows), qs = int64_t(T * 3 * C), tt = int64_t(T * T), ts = int64_t(T * C);
  for (size_t h = 0; h < H; ++h) {
    const char* q = y.qkv.as<char>() + h * D * e;
    const char* probs = opt_.probs_kept() ? y.attn_keep.as<char>() + h * rows * T * T * e : head_probs(y, rows, T, h);
    const char* datt = dtmp_.as<char>() + h * D * e;
    char* dq = dqkv_.as<char>() + h * D * e;
    // dP_h = dAtt_h V_h^T (FP32); dV_h = P_h^T dAtt_h.
    ops_.gemm(gemm_of(GemmShape(T, T, D, B), GemmIn(datt, C, ts), GemmIn(q + 2 * C * e, 3 * C, qs).t(),
                      GemmOut(dprobs_.data(), T, tt), compute_, DType::F32));
    ops_.gemm(gemm_of(GemmShape(T, D, T, B), GemmIn(probs, T, tt).t(), GemmIn(datt, C, ts),
                      GemmOut(dq + 2 * C * e, 3 * C, qs), compute_, compute_));
    // dS = softmax'(dP) with the 1/sqrt(D) folded in; dQ_h = dS_h K_h, dK_h = dS_h^T Q_h.
    CausalSoftmaxBackwardArgs sb;
    sb.batch = B, sb.T = int64_t(T), sb.scale = scale_, sb.p = probs, sb.p_type = compute_;
    sb.dp = dprobs_.data(), sb.dp_type = DType::F32, sb.ds = dscores_.data(), sb.ds_type = compute_;
    ops_.causal_softmax_backward(sb);
    ops_.gemm(gemm_of(GemmShape(T, D, T, B), GemmIn(dscores_.data(), T, tt), GemmIn(q + C * e, 3 * C, qs),
                      GemmOut(dq, 3 * C, qs), compute_, compute_));
    ops_.gemm(gemm_of(GemmShape(T, D, T, B), GemmIn(dscores_.data(), T, tt).t(), GemmIn(q, 3 * C, qs),
                      GemmOut(dq + C * e, 3 * C, qs), compute_, compute_));
  }
}

void Gpt::backward(const void* params, void* grads, size_t rows, const std::function<void(int)>& ready) {
  const size_t T = opt_.seq_len, C = opt_.n_embd, H = opt_.n_head, D = C / H, N = rows * T, V = opt_.vocab;
  const size_t L = opt_.n_layer;
  auto P = [&](int i) { return param(params, i); };
  auto G = [&](int i) { return param(grads, i); };
  auto done = [&](int i) { ready(i); };
  // A linear layer's weight (index w) and bias (w + 1) gradients, handed on as they complete, then
  // its input gradient.
  auto linear_back = [&](int id, const Tensor& dy, const Tensor& x, int w, const Tensor& dx) {
    before_grads(w, w + 1);
    lin_.backward_weight(id, dy, x, G(w), G(w + 1));
    done(w + 1);
    done(w);
    lin_.backward_input(id, dy, P(w), dx);
  };
  // A LayerNorm's backward (gamma at index g, beta at g + 1), its parameters handed on.
  auto layernorm_back = [&](const void* dy, const void* x, int g, const Buffer& mean, const Buffer& rstd,
                            bool accumulate) {
    before_grads(g, g + 1);
    layernorm_backward(dy, x, params, grads, g, mean, rstd, accumulate, N);
    done(g + 1);
    done(g);
  };
  // LM head: d(lnf) = dlogits wte; d(wte) = dlogits^T lnf (written here, the embedding adds to it).
  // Padded (head_, see gpt.h): both over Vp, and d(wte)'s first V rows copied to the gradient.
  const int64_t Vp = int64_t(opt_.logits_ld()), Vh = padded_head() ? Vp : int64_t(V);
  before_grads(kWte, kWte);
  const void* head = padded_head() ? head_.data() : P(kWte).data;
  void* dhead = padded_head() ? head_.data() : G(kWte).data;
  ops_.gemm(gemm_of(GemmShape(N, C, Vh), GemmIn(dlogits_.data(), Vp), GemmIn(head, C), GemmOut(dtmp_.data(), C),
                    compute_, compute_));
  ops_.gemm(gemm_of(GemmShape(Vh, C, N), GemmIn(dlogits_.data(), Vp).t(), GemmIn(lnf_.data(), C),
                    GemmOut(dhead, C), compute_, compute_));
  if (padded_head()) ops_.cast(head_.data(), compute_, G(kWte).data, compute_, V * C);
  layernorm_back(dtmp_.data(), res_out_.data(), lnf_w(), meanf_, rstdf_, false);
  for (size_t li = L; li-- > 0;) {
    // The last block's activations are still in the shared buffers after forward.
    if (li + 1 < L) {
      if (opt_.recompute) forward_block(params, li, rows, T, false);
      else if (opt_.recompute_mlp) forward_mlp(params, li, N, false);
    }
    const Saved& y = saved(li);
    const Saved& m = mlp_saved(li);
    auto lp = [&](int slot) { return layer_param(li, slot); };
    // MLP: dres is the gradient of the block's output (the residual passes it through).
    linear_back(linear_id(li, kMProj), act(dres_, N, C), act(m.gelu, N, 4 * C), lp(kMProjW), act(dfc_, N, 4 * C));
    ops_.activation_backward(Activation::GeluTanh, act(m.fc, N, 4 * C), act(dfc_, N, 4 * C), act(dfc_, N, 4 * C));
    linear_back(linear_id(li, kFc), act(dfc_, N, 4 * C), act(y.ln2, N, C), lp(kFcW), act(dtmp_, N, C));
    layernorm_back(dtmp_.data(), y.res_mid.data(), lp(kLn2W), y.mean2, y.rstd2, true);
    // Attention: dres is now the gradient of the middle residual.
    linear_back(linear_id(li, kProj), act(dres_, N, C), act(y.att, N, C), lp(kProjW), act(dtmp_, N, C));  // d(att)
    if (opt_.fused_attention) {
      AttentionBackwardArgs a;
      a.B = int64_t(rows), a.T = int64_t(T), a.H = int64_t(H), a.D = int64_t(D), a.scale = scale_, a.type = compute_;
      a.qkv = y.qkv.data(), a.out = y.att.data(), a.dout = dtmp_.data();
      a.row_max = y.attn_keep.as<float>(), a.row_sum = y.attn_keep.as<float>() + N * H;
      a.delta = delta_.as<float>(), a.dqkv = dqkv_.data();
      ops_.attention_backward(a);
    } else {
      attention_explicit_backward(y, rows);
    }
    linear_back(linear_id(li, kQkv), act(dqkv_, N, 3 * C), act(y.ln1, N, C), lp(kQkvW), act(dtmp_, N, C));
    layernorm_back(dtmp_.data(), res_in_[li].data(), lp(kLn1W), y.mean1, y.rstd1, true);
  }
  // Embeddings: d(wpe) written, d(wte) accumulated onto the head's part.
  before_grads(kWpe, kWpe);
  EmbeddingBackwardArgs eb;
  eb.B = int64_t(rows), eb.T = int64_t(T), eb.C = int64_t(C), eb.vocab = int64_t(V), eb.max_positions = int64_t(T);
  eb.type = compute_, eb.tokens = tokens_.as<int32_t>(), eb.dx = dres_.data(), eb.dwte = G(kWte).data;
  eb.dwpe = G(kWpe).data;
  ops_.embedding_backward(eb);
  done(kWpe);
  done(kWte);
}

// The context's positions rounded up to kSampleStep (a few shapes for the GEMM plans), not the
// whole seq_len.
size_t Gpt::stage_context(const std::vector<int32_t>& context, size_t* positions) {
  const size_t T = opt_.seq_len;
  AMP_CHECK(!context.empty(), "next_logits: empty context");
  const size_t n = std::min(T, context.size());
  const size_t Tn = std::min(T, (n + kSampleStep - 1) / kSampleStep * kSampleStep);
  std::fill(tokens_host_.begin(), tokens_host_.begin() + long(Tn), 0);
  std::copy(context.end() - long(n), context.end(), tokens_host_.begin());
  mem_.upload(tokens_.data(), tokens_host_.data(), Tn * sizeof(int32_t));
  *positions = Tn;
  return n;
}

std::vector<float> Gpt::next_logits(const void* params, const std::vector<int32_t>& context) {
  size_t Tn = 0;
  const size_t n = stage_context(context, &Tn);
  forward(params, 1, Tn, false, false);  // one sequence per token: wte itself, no copy
  return download_logits(logits_.as<char>() + (n - 1) * opt_.logits_ld() * dtype_size(compute_));
}

void Gpt::context_logits(const void* params, const std::vector<int32_t>& context) {
  size_t Tn = 0;
  const size_t n = stage_context(context, &Tn);
  forward_blocks(params, 1, Tn, false);
  position_logits(params, n - 1);
}

void Gpt::position_logits(const void* params, size_t row) {
  const size_t C = opt_.n_embd;
  layernorm(res_out_.as<char>() + row * C * dtype_size(compute_), params, lnf_w(), lnf_.data(), meanf_, rstdf_, 1);
  ops_.gemm(gemm_of(GemmShape(1, opt_.vocab, C), GemmIn(lnf_.data(), C), GemmIn(param(params, kWte).data, C).t(),
                    GemmOut(logits_.data(), opt_.logits_ld()), compute_, compute_));
}

std::vector<float> Gpt::download_logits(const void* row) const {
  const size_t V = opt_.vocab;
  std::vector<char> raw(V * dtype_size(compute_));
  mem_.download(raw.data(), row, raw.size());
  std::vector<float> out(V);
  convert(raw.data(), compute_, out.data(), DType::F32, V);
  return out;
}

}  // namespace amp
