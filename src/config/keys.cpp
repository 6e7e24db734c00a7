// The key table: defaults, help, ranges and choices of every config key, and where each value
// goes in Config. One row per key; the loader, --dry-run, --help and the hash all read it.
#include <algorithm>

#include "config/config_detail.h"

namespace amp::config_detail {

namespace {
// The fields most fault drills share.
const RecordField kStepField{"step", &FaultSpec::step, nullptr, positive_upto(kMaxSteps)};
const RecordField kRankField{"rank", &FaultSpec::rank, nullptr, count_upto(kMaxRank), {}, nullptr, "0"};
}  // namespace

#define F(m) [](Config& c) -> FieldRef { return &c.m; }
// An enumeration: the values, in the order of the key's choices.
#define E(m, ...) [](Config& c) -> FieldRef { return enum_ref(&c.m, {__VA_ARGS__}); }

const std::vector<Key>& keys() {
  static const std::vector<Key> k = {
      // run
      {"run.name", "\"run\"", "run name (default out_dir is runs/<name>)", F(run.name)},
      {"run.seed", "1", "seed of initialization, shuffling and synthetic data", F(run.seed), count_upto(9.0e15)},
      {"run.steps", "0", "training steps (0: use run.epochs)", F(run.steps), count_upto(kMaxSteps)},
      {"run.epochs", "1", "epochs over the training set when run.steps is 0", F(run.epochs), count_upto(kMaxSteps)},
      {"run.log_interval", "50", "steps between progress lines and metrics.jsonl records", F(run.log_interval), positive_upto(kMaxSteps)},
      {"run.eval_interval", "0", "steps between evaluations (0: at the end of each epoch)", F(run.eval_interval), count_upto(kMaxSteps)},
      {"run.out_dir", "\"\"", "output folder (\"\": runs/<run.name>)", F(run.out_dir)},
      {"run.threads", "0", "CPU threads per rank (0: cores / ranks on this node)", F(run.threads), count_upto(kMaxThreads)},
      {"run.device", "\"auto\"", "compute device (auto: CUDA when a GPU is visible)", F(run.device), {}, {"auto", "cpu", "cuda"}},
      {"run.cuda_graph", "true", "CUDA: capture the step into a graph after warm-up and replay it (not with fault drills or data.grad_accum_steps > 1)", F(run.cuda_graph)},
      {"run.max_loss_ratio", "10000", "stop as diverged (exit 5) when a log interval's mean training loss exceeds this multiple of step 1's (0: off)", F(run.max_loss_ratio), at_least(0)},
      {"run.progress", "\"auto\"", "progress output (auto: bar on a terminal, lines otherwise)", F(run.progress), {}, {"auto", "bar", "lines", "off"}},
      {"run.sample_interval", "0", "gpt: steps between text samples (0: only at the end of the run)", F(run.sample_interval), count_upto(kMaxSteps)},
      {"run.max_loss_vs_uniform", "4", "classifiers and language models: stop as diverged (exit 5) when a log interval's mean cross-entropy exceeds this multiple of ln(classes), the loss of predicting every class alike, and step 1's loss (0: off)", F(run.max_loss_vs_uniform), at_least(0)},
      {"run.eval_iters", "0", "evaluation batches per rank at most (0: the whole evaluation set), as llm.c's val_max_steps", F(run.eval_iters), count_upto(kMaxSteps)},
      // model
      {"model.type", "\"mlp\"", "model family: mlp (model.hidden), gpt (decoder-only transformer: model.n_layer ...; data.format text or tokens)", E(model.type, ModelType::Mlp, ModelType::Gpt), {}, {"mlp", "gpt"}},
      {"model.hidden", "[1024, 1024]", "hidden layer widths (input and output come from the data)", F(model.hidden), positive_upto(kMaxWidth)},
      {"model.activation", "\"relu\"", "hidden activation", E(model.activation, Activation::Relu, Activation::Gelu), {}, {"relu", "gelu"}},
      {"model.init", "\"pytorch\"", "weight init: pytorch (U(+-1/sqrt(fan_in))), xavier, normal (std init_std)", F(model.init), {}, {"pytorch", "xavier", "normal"}},
      {"model.loss_weight", "1", "coefficient of the training loss (gradients scale with it; reported losses do not)", F(model.loss_weight), above(0)},
      {"model.init_std", "0.01", "standard deviation of model.init=normal", F(model.init_std), above(0)},
      {"model.n_layer", "2", "gpt: transformer blocks", F(model.n_layer), positive_upto(kMaxLayers)},
      {"model.n_head", "4", "gpt: attention heads per block", F(model.n_head), positive_upto(kMaxHeads)},
      {"model.n_embd", "128", "gpt: embedding width (a multiple of model.n_head)", F(model.n_embd), positive_upto(kMaxEmbd)},
      {"model.seq_len", "64", "gpt: context length T (each training window: T inputs, T next-token targets)", F(model.seq_len), positive_upto(kMaxSeqLen)},
      {"model.vocab_size", "0", "gpt: vocabulary (0: 256 for text, largest token + 1 for tokens; GPT-2 BPE: 50257)", F(model.vocab_size), count_upto(kMaxWidth)},
      {"model.vocab_pad", "0", "gpt: pad the logits' rows (the LM head's output and its gradient) to a multiple of this many columns, for aligned GEMMs (on a GPU the loss's LM head runs its GEMMs at the padded width, through a padded copy of wte); the padding is never part of the softmax, the loss, sampling or the weights (0: 128 above 256 tokens, else 1 = none)", F(model.vocab_pad), count_upto(4096)},
      {"model.init_from", "\"\"", "start from these weights (fine-tuning) instead of model.init: a safetensors file (Hugging Face GPT-2 names), an llm.c model file, or an amp_ddp checkpoint (its masters only); the optimizer and the loss scale start fresh; a resumed checkpoint takes precedence", F(model.init_from)},
      {"model.recompute", "\"none\"", "gpt: activation recomputation: none (every block's activations kept for backward), attention (model.attention explicit: no block keeps its attention probabilities, each head's computed again in backward: one batched GEMM and the softmax per head), mlp (the MLP's two activations, half of a block's, kept for one block at a time and computed again in backward: one linear layer and GELU per block), block (only each block's input kept; the rest computed again in backward, block by block: about one more forward pass of time); the same bits in every mode", F(model.recompute), {}, {"none", "attention", "mlp", "block"}},
      {"model.attention", "\"explicit\"", "gpt: how attention runs: explicit (two batched GEMMs around the causal softmax; the [T, T] probabilities of every head kept for backward), fused (one op, the flash-attention algorithm: two FP32 numbers per position and head kept, the probabilities recomputed in backward; memory linear in seq_len)", F(model.attention), {}, {"explicit", "fused"}},
      // data
      {"data.format", "\"idx\"", "data source (text, tokens: token streams for model.type gpt)", F(data.format), {}, {"idx", "csv", "synthetic", "text", "tokens"}},
      {"data.train_images", "\"/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz\"", "IDX training inputs (raw or .gz)", F(data.train_images)},
      {"data.train_labels", "\"/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz\"", "IDX training labels", F(data.train_labels)},
      {"data.eval_images", "\"/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz\"", "IDX evaluation inputs (\"\", with data.eval_labels \"\": no evaluation)", F(data.eval_images)},
      {"data.eval_labels", "\"/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz\"", "IDX evaluation labels", F(data.eval_labels)},
      {"data.train_csv", "\"\"", "CSV training file", F(data.train_csv)},
      {"data.eval_csv", "\"\"", "CSV evaluation file (\"\": split off data.eval_fraction)", F(data.eval_csv)},
      {"data.csv_header", "true", "CSV files start with a header line", F(data.csv_header)},
      {"data.target", "\"\"", "CSV target column: name or 0-based index (\"\": last column)", F(data.target)},
      {"data.task", "\"classification\"", "CSV task", F(data.task), {}, {"classification", "regression"}},
      {"data.eval_fraction", "0", "CSV: fraction of the training file held out for evaluation (random rows); text, tokens: the last fraction of the token stream", F(data.eval_fraction), between(0, 1, false, true)},
      {"data.n_classes", "0", "classes (0: largest training label + 1)", F(data.n_classes), count_upto(kMaxWidth)},
      {"data.normalize", "\"none\"", "feature normalization fitted on the training set", F(data.normalize), {}, {"none", "global", "per_feature"}},
      {"data.batch_size", "128", "samples per rank per micro-batch (global batch = batch_size x grad_accum_steps x ranks)", F(data.batch_size), positive_upto(kMaxBatch)},
      {"data.grad_accum_steps", "1", "micro-batches of batch_size per rank whose gradients accumulate (FP32) into one optimizer step and one all-reduce", F(data.grad_accum_steps), positive_upto(kMaxAccum)},
      {"data.eval_batch_size", "0", "samples per rank per evaluation batch (0: 1000 for an mlp, data.batch_size for a gpt, whose windows take far more memory)", F(data.eval_batch_size), count_upto(kMaxBatch)},
      {"data.shuffle", "true", "reshuffle the training set every epoch (seeded, same on every rank)", F(data.shuffle)},
      {"data.synthetic.train_samples", "1024", "synthetic regression: training samples", F(data.synthetic.train_samples), positive_upto(kMaxSamples)},
      {"data.synthetic.eval_samples", "256", "synthetic regression: evaluation samples (0: none)", F(data.synthetic.eval_samples), count_upto(kMaxSamples)},
      {"data.synthetic.features", "10", "synthetic regression: input features", F(data.synthetic.features), positive_upto(kMaxWidth)},
      {"data.synthetic.outputs", "1", "synthetic regression: outputs", F(data.synthetic.outputs), positive_upto(kMaxWidth)},
      {"data.synthetic.noise", "0.1", "synthetic regression: noise standard deviation", F(data.synthetic.noise), at_least(0)},
      {"data.text_files", "[]", "text: files or glob patterns (text files only), concatenated in order as bytes (vocabulary 256) or, with data.tokenizer gpt2, as GPT-2 tokens", F(data.text_files)},
      {"data.train_tokens", "[]", "tokens: llm.c token shards (uint16, or uint32 in version 2 shards): paths or glob patterns, matches sorted", F(data.train_tokens)},
      {"data.eval_tokens", "[]", "tokens: evaluation shards ([]: split off data.eval_fraction, or none)", F(data.eval_tokens)},
      {"data.tokenizer", "\"auto\"", "text and tokens: what makes text tokens and back (prompts, samples): bytes (vocabulary 256), gpt2 (GPT-2's BPE, vocabulary 50257: text files are encoded with it, each after <|endoftext|>; scripts/setup.sh --gpt2 fetches its files), none (token ids are printed), auto (bytes for text, none for tokens)", F(data.tokenizer), {}, {"auto", "bytes", "gpt2", "none"}},
      // precision
      {"precision.compute", "\"fp16\"", "compute precision of GEMMs and activations (masters stay FP32); fp8: the linear layers' GEMMs on FP8 operands (inputs and weights E4M3, output gradients E5M2, per-tensor delayed scaling: precision.fp8.*), everything else bf16", E(precision.compute_choice, ComputeChoice::F32, ComputeChoice::F16, ComputeChoice::BF16, ComputeChoice::FP8), {}, {"fp32", "fp16", "bf16", "fp8"}},
      {"precision.fp8.scaling", "\"delayed\"", "fp8: per-tensor scales: delayed (from each tensor's amax history, set after every step, rounded down to a power of two) or none (every scale 1: the unscaled baseline)", E(precision.fp8_params.delayed, true, false), {}, {"delayed", "none"}},
      {"precision.fp8.gemm", "\"auto\"", "fp8: the GEMMs: auto (FP8 codes into FP8 tensor-core GEMMs where the device has them, compute capability 8.9 on, for layers whose widths and rows are multiples of 16; elsewhere emulated) or emulated (FP8-quantized values in BF16 GEMMs, everywhere)", E(precision.fp8_params.native_gemm, true, false), {}, {"auto", "emulated"}},
      {"precision.fp8.amax_history", "16", "fp8: steps of amaxes each tensor's scale is taken from", F(precision.fp8_params.history), positive_upto(1024)},
      {"precision.fp8.amax_compute", "\"max\"", "fp8: the amax a scale is set from: max (of the history) or most_recent", E(precision.fp8_params.algo, AmaxAlgo::Max, AmaxAlgo::MostRecent), {}, {"max", "most_recent"}},
      {"precision.fp8.margin", "0", "fp8: powers of two of headroom below the format's largest value", F(precision.fp8_params.margin), count_upto(32)},
      {"precision.loss_scale.mode", "\"auto\"", "loss scaling (auto: dynamic for fp16, none otherwise)", E(precision.loss_scale, LossScaleChoice::Auto, LossScaleChoice::None, LossScaleChoice::Static, LossScaleChoice::Dynamic), {}, {"auto", "none", "static", "dynamic"}},
      {"precision.loss_scale.init_scale", "65536", "initial (dynamic) or fixed (static) loss scale", F(precision.scaler.init_scale), above(0)},
      {"precision.loss_scale.growth_factor", "2", "dynamic: scale multiplier after growth_interval clean steps", F(precision.scaler.growth_factor), above(1)},
      {"precision.loss_scale.backoff_factor", "0.5", "dynamic: scale multiplier on overflow", F(precision.scaler.backoff_factor), between(0, 1, true, true)},
      {"precision.loss_scale.growth_interval", "2000", "dynamic: consecutive clean steps before growth", F(precision.scaler.growth_interval), positive_upto(kInt32Max)},
      {"precision.loss_scale.hysteresis", "1", "dynamic: overflows tolerated before backing off (1: PyTorch)", F(precision.scaler.hysteresis), positive_upto(kInt32Max)},
      {"precision.loss_scale.min_scale", "1", "dynamic: lower clamp of the scale", F(precision.scaler.min_scale), above(0)},
      {"precision.loss_scale.max_scale", ".inf", "dynamic: upper clamp of the scale", F(precision.scaler.max_scale), above_or_inf(0)},
      {"precision.loss_scale.divergence_steps", "20", "consecutive overflowing steps at the minimum scale that end the run", F(precision.divergence_steps), positive_upto(kInt32Max)},
      {"precision.telemetry_interval", "0", "steps between per-layer gradient underflow telemetry (0: off)", F(precision.telemetry_interval), count_upto(kMaxSteps)},
      // optimizer
      {"optimizer.type", "\"adamw\"", "optimizer on the FP32 master weights", E(optimizer.params.kind, OptimizerKind::Sgd, OptimizerKind::AdamW), {}, {"sgd", "adamw"}},
      {"optimizer.lr", "0.001", "peak learning rate", F(optimizer.lr), above(0)},
      {"optimizer.momentum", "0", "SGD momentum", F(optimizer.params.momentum), between(0, 1, false, true)},
      {"optimizer.nesterov", "false", "SGD Nesterov momentum", F(optimizer.params.nesterov)},
      {"optimizer.weight_decay", "0", "decoupled (AdamW) or L2 (SGD) weight decay", F(optimizer.params.weight_decay), at_least(0)},
      {"optimizer.decay", "\"matrices\"", "tensors weight decay applies to: matrices (weights and embeddings; not biases and LayerNorm gains, as nanoGPT and llm.c) or all", E(optimizer.decay, DecayChoice::Matrices, DecayChoice::All), {}, {"matrices", "all"}},
      {"optimizer.beta1", "0.9", "AdamW beta1", F(optimizer.params.beta1), between(0, 1, false, true)},
      {"optimizer.beta2", "0.999", "AdamW beta2", F(optimizer.params.beta2), between(0, 1, false, true)},
      {"optimizer.eps", "1e-8", "AdamW epsilon", F(optimizer.params.eps), above(0)},
      {"optimizer.grad_clip", "0", "clip the global gradient norm to this value (0: off)", F(optimizer.grad_clip), at_least(0)},
      {"optimizer.schedule", "\"constant\"", "learning-rate schedule: constant; warmup_cosine or warmup_linear (warm-up, then cosine or linear decay to min_lr); wsd (warm-up, lr, then linear decay to min_lr over the run's last decay_steps)", E(optimizer.schedule, LrSchedule::Kind::Constant, LrSchedule::Kind::WarmupCosine, LrSchedule::Kind::WarmupLinear, LrSchedule::Kind::Wsd), {}, {"constant", "warmup_cosine", "warmup_linear", "wsd"}},
      {"optimizer.warmup_steps", "0", "linear warm-up steps (schedules other than constant)", F(optimizer.warmup_steps), count_upto(kMaxSteps)},
      {"optimizer.min_lr", "0", "the learning rate the decay ends at", F(optimizer.min_lr), at_least(0)},
      {"optimizer.decay_steps", "0", "length of the decay (0: cosine and linear until the last step, wsd the last fifth after warm-up); given, the schedule does not depend on run.steps", F(optimizer.decay_steps), count_upto(kMaxSteps)},
      // distributed
      {"distributed.comm", "\"auto\"", "gradient communicator (auto: nccl on CUDA, mpi on CPU)", F(distributed.comm), {}, {"auto", "mpi", "nccl"}},
      {"distributed.overlap", "\"auto\"", "all-reduce buckets during backward (auto: on GPUs, and on CPUs with a core to spare)", E(distributed.overlap, Toggle::Auto, Toggle::On, Toggle::Off), {}, {"auto", "on", "off"}},
      {"distributed.bucket_mb", "25", "gradient bucket size in MiB", F(distributed.bucket_mb), between(0, kMaxBucketMb, true), {}},
      {"distributed.first_bucket_mb", "1", "size of the first (last-layer) bucket in MiB", F(distributed.first_bucket_mb), between(0, kMaxBucketMb, true), {}},
      {"distributed.timeout_s", "600", "collective watchdog: a collective without progress for this long ends the job, naming the ranks it waits for", F(distributed.timeout_s), between(0, 1e7, true)},
      {"distributed.zero", "0", "optimizer-state sharding: 0 = every rank holds all FP32 masters and moments; 1 = ZeRO stage 1, each rank holds 1/N of them (gradients reduce-scattered, weights all-gathered); 2 = ZeRO stage 2, stage 1 and each rank keeps only its shard of the reduced 16-bit gradients: a bucket's memory is returned once its reduce-scatter is done (CPU backend; CUDA through its virtual memory API)", F(distributed.zero), count_upto(2), {}},
      {"distributed.hash_interval", "100", "steps between cross-rank parameter hash checks (0: only at the end)", F(distributed.hash_interval), count_upto(kMaxSteps), {}},
      // checkpoint
      {"checkpoint.interval", "0", "steps between checkpoints (0: none periodic)", F(checkpoint.interval), count_upto(kMaxSteps)},
      {"checkpoint.keep", "3", "checkpoints kept (older ones are deleted)", F(checkpoint.keep), positive_upto(1e6)},
      {"checkpoint.final", "true", "write a checkpoint at the end of the run", F(checkpoint.final)},
      {"checkpoint.on_signal", "true", "checkpoint and stop on SIGTERM/SIGUSR1", F(checkpoint.on_signal)},
      {"checkpoint.dir", "\"\"", "checkpoint folder (\"\": <out_dir>/checkpoints)", F(checkpoint.dir)},
      {"checkpoint.resume", "\"none\"", "none | auto (newest intact checkpoint in dir) | PATH", F(checkpoint.resume)},
      // faults
      {"faults.inject_nonfinite", "[]", "list of {step, rank, tensor, value: inf|nan}: plant a non-finite gradient (tensor: a parameter's, or with fp8 compute an FP8 output gradient NAME.grad_output before its E5M2 cast)", F(faults.inject_nonfinite), {}, {},
       {kStepField, kRankField, {"tensor", nullptr, &FaultSpec::tensor, {}, {}, "a tensor name", "", true},
        {"value", nullptr, &FaultSpec::value, {}, {"inf", "nan"}, nullptr, "inf"}}},
      {"faults.corrupt_params", "[]", "list of {step, rank}: perturb one master weight on that rank after that step (desync drill)", F(faults.corrupt_params), {}, {},
       {kStepField, kRankField}},
      {"faults.raise_signal", "[]", "list of {step, rank, signal: TERM|USR1}: deliver a stop signal after that step", F(faults.raise_signal), {}, {},
       {kStepField, kRankField, {"signal", nullptr, &FaultSpec::value, {}, {"TERM", "USR1"}, nullptr, "TERM"}}},
      {"faults.await_signal", "[]", "list of {step, rank, timeout_s}: after that step, wait (up to timeout_s, default 300) for a stop signal from outside: holds a run at a known step for a preemption drill; none by then is an error", F(faults.await_signal), {}, {},
       {kStepField, kRankField, {"timeout_s", &FaultSpec::timeout_s, nullptr, positive_upto(86400), {}, nullptr, "300"}}},
      {"faults.fail_setup", "[]", "list of {rank, phase: backend|data|comm|resume|output}: fail that set-up phase on that rank (agreement drill)", F(faults.fail_setup), {}, {},
       {kRankField, {"phase", nullptr, &FaultSpec::value, {}, {"backend", "data", "comm", "resume", "output"}}}},
      // sample
      {"sample.prompt", "\"\\n\"", "gpt: the text samples continue (token ids separated by spaces where the data names no tokenizer)", F(sample.prompt)},
      {"sample.tokens", "200", "gpt: tokens generated per sample (0: no samples)", F(sample.tokens), count_upto(kMaxGenerated)},
      {"sample.temperature", "0.8", "gpt: sampling temperature", F(sample.temperature), above(0)},
      {"sample.top_k", "40", "gpt: sample among the k likeliest tokens (0: all)", F(sample.top_k), count_upto(kMaxWidth)},
      {"sample.seed", "1", "gpt: seed of sampling", F(sample.seed), count_upto(9.0e15)},
      {"sample.top_p", "1", "gpt: nucleus sampling: then among the fewest likeliest of those whose probabilities sum to p or more (1: all)", F(sample.top_p), between(0, 1, true, false)},
  };
  return k;
}
#undef F
#undef E
const Key* find_key(const std::string& path) {
  for (const auto& k : keys())
    if (path == k.path) return &k;
  return nullptr;
}

bool is_section(const std::string& path) {
  const std::string prefix = path + ".";
  for (const auto& k : keys())
    if (std::string(k.path).compare(0, prefix.size(), prefix) == 0) return true;
  return false;
}

std::vector<std::string> all_paths() {
  std::vector<std::string> v;
  for (const auto& k : keys()) {
    std::string p = k.path;
    v.push_back(p);
    for (size_t dot = p.find('.'); dot != std::string::npos; dot = p.find('.', dot + 1))
      v.push_back(p.substr(0, dot));
  }
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

}  // namespace amp::config_detail
