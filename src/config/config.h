// The resolved run configuration: one struct, filled from a YAML file and --set overrides through
// one table of keys (config/keys.cpp) that also gives defaults, validation and --help. The
// choices the program acts on are parsed once, by the loader, into typed fields (enums, DType,
// and the ScalerParams / OptimizerParams the kernels take), which the rest of the program uses.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "amp/fp8_scaling.h"
#include "amp/loss_scaler.h"
#include "core/activation.h"
#include "core/dtype.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"

namespace amp {

enum class Toggle : int32_t { Auto, On, Off };

// precision.compute as written: fp8 computes the linear layers' GEMMs on FP8 operands and
// everything else in BF16 (Config::Precision::compute is then BF16 and fp8 is set).
enum class ComputeChoice : int32_t { F32, F16, BF16, FP8 };

// Names of the typed choices, as the config spells them ("fp16", "adamw", "dynamic").
const char* precision_name(DType t);
const char* optimizer_name(OptimizerKind k);
const char* scale_mode_name(ScaleMode m);
struct Config;
// precision.compute as the run computes: "fp8" with FP8 linear layers, else precision_name(compute).
const char* compute_name(const Config& c);

// The most training steps a run may have (step numbers stay well inside every counter and the
// fixed-width checkpoint file names).
constexpr int64_t kMaxSteps = 1000000000;
// distributed.timeout_s's default, also the collective watchdog's before the config is read.
constexpr double kDefaultTimeoutSeconds = 600;

struct FaultSpec {
  int64_t step = 0;     // 1-based training step
  int64_t rank = 0;     // rank that plants the non-finite gradient
  std::string tensor;   // parameter tensor name ("" = the first one)
  std::string value;    // "inf" or "nan"
  int64_t timeout_s = 0;  // faults.await_signal: how long to wait for the signal
};

// precision.loss_scale.mode as written: auto resolves against the compute precision (dynamic for
// fp16, none otherwise) into ScalerParams::mode.
enum class LossScaleChoice : int32_t { Auto, None, Static, Dynamic };

// model.type: the model family (model/make_model.h builds it).
enum class ModelType : int32_t { Mlp, Gpt };

// optimizer.decay: which tensors weight decay applies to (the layout's per-tensor attribute:
// matrices and embeddings, not biases and norm gains, as nanoGPT and llm.c do; or all).
enum class DecayChoice : int32_t { Matrices, All };

struct Config {
  // Keys the program acts on are typed; strings are names (files, folders) or choices handed to the
  // component that owns them (run.device to the backend factory, run.progress to the progress
  // output, distributed.comm to the communicator factory, data.* to the loaders), which the key
  // table validates against their choices first.
  struct Run {
    std::string name, out_dir, device, progress;
    int64_t seed = 0, steps = 0, epochs = 0, log_interval = 0, eval_interval = 0, threads = 0;
    double max_loss_ratio = 0;
    double max_loss_vs_uniform = 0;  // x ln(classes): the cross-entropy divergence check
    bool cuda_graph = true;
    int64_t sample_interval = 0;  // gpt: steps between text samples (0: only at the end)
    int64_t eval_iters = 0;       // evaluation batches per rank at most (0: all)
  } run;
  struct Model {
    ModelType type = ModelType::Mlp;
    std::string init;
    Activation activation = Activation::Relu;
    std::vector<int64_t> hidden;
    double init_std = 0, loss_weight = 1;
    // gpt: blocks, heads per block, embedding width (a multiple of n_head), context length T, and
    // the vocabulary (0: 256 for text, the largest token + 1 for token shards).
    int64_t n_layer = 0, n_head = 0, n_embd = 0, seq_len = 0, vocab_size = 0;
    // gpt: the logits' rows padded to a multiple of this many columns (0: 128 for a vocabulary
    // above 256, else none; 1: none).
    int64_t vocab_pad = 0;
    // Initial weights instead of model.init: a safetensors file (Hugging Face GPT-2 names), an
    // llm.c model file or an amp_ddp checkpoint ("" : none). A fresh optimizer and loss scale.
    std::string init_from;
    std::string recompute = "none";  // gpt: none, attention, mlp, block (model/gpt.h)
    std::string attention = "explicit";  // gpt: explicit, fused (model/gpt.h)
  } model;
  struct Synthetic {
    int64_t train_samples = 0, eval_samples = 0, features = 0, outputs = 0;
    double noise = 0;
  };
  struct Data {
    std::string format, train_images, train_labels, eval_images, eval_labels, train_csv, eval_csv,
        target, task, normalize;
    std::string tokenizer = "auto";  // text and tokens: auto, bytes, gpt2, none (data/tokenizer.h)
    bool csv_header = true, shuffle = true;
    double eval_fraction = 0;
    int64_t n_classes = 0, batch_size = 0, eval_batch_size = 0;
    int64_t grad_accum_steps = 1;  // micro-batches of batch_size accumulated into one optimizer step
    Synthetic synthetic;
    // Paths or glob patterns: text files (format text), llm.c token shards (format tokens).
    std::vector<std::string> text_files, train_tokens, eval_tokens;
  } data;
  struct Precision {
    ComputeChoice compute_choice = ComputeChoice::F16;  // precision.compute
    DType compute = DType::F16;  // the activations' and gradients' dtype (resolved: fp8 -> BF16)
    bool fp8 = false;            // precision.compute fp8
    Fp8Params fp8_params;        // precision.fp8.*
    LossScaleChoice loss_scale = LossScaleChoice::Auto;
    ScalerParams scaler;            // precision.loss_scale.*; mode resolved from loss_scale
    int64_t divergence_steps = 0;   // precision.loss_scale.divergence_steps
    int64_t telemetry_interval = 0;
  } precision;
  struct Optimizer {
    OptimizerParams params;  // type, momentum, nesterov, weight_decay, beta1, beta2, eps
    LrSchedule::Kind schedule = LrSchedule::Kind::Constant;
    double lr = 0, grad_clip = 0, min_lr = 0;
    int64_t warmup_steps = 0, decay_steps = 0;
    DecayChoice decay = DecayChoice::Matrices;
  } optimizer;
  struct Distributed {
    double bucket_mb = 0, first_bucket_mb = 0, timeout_s = 0;
    int64_t hash_interval = 0;
    int64_t zero = 0;  // 0: replicated optimizer state; 1: sharded (ZeRO stage 1); 2: and gradients (stage 2)
    std::string comm;
    Toggle overlap = Toggle::Auto;
  } distributed;
  struct Checkpoint {
    int64_t interval = 0, keep = 0;
    bool final = true, on_signal = true;
    std::string dir, resume;
  } checkpoint;
  struct Faults {
    std::vector<FaultSpec> inject_nonfinite;
    std::vector<FaultSpec> raise_signal;  // value holds the signal: TERM or USR1
    std::vector<FaultSpec> corrupt_params;
    std::vector<FaultSpec> await_signal;  // the rank waits after that step until a stop signal arrives
    std::vector<FaultSpec> fail_setup;  // value holds the phase; step is unused
  } faults;
  struct Sample {  // gpt: text generation
    std::string prompt;         // the text samples continue
    int64_t tokens = 0;         // generated tokens per sample (0: none)
    double temperature = 1;     // > 0
    int64_t top_k = 0;          // sample among the k likeliest tokens (0: all)
    double top_p = 1;           // then among the likeliest whose probabilities reach p (1: all)
    int64_t seed = 0;
  } sample;

  // Where each key's value came from: "file.yaml:12:5", "--set" or "default".
  std::map<std::string, std::string> origin;
  std::string source;  // the config file path as given

  // Whether the file or a --set gave `key` (its origin is not "default").
  bool given(const std::string& key) const;

  // Derived helpers (after validation).
  std::string resolved_out_dir() const;
  std::string resolved_checkpoint_dir() const;
};

// Parse a YAML file plus "--set key=value" overrides into a validated Config.
// Throws amp::Error(ErrorKind::Config, "config error: FILE:LINE:COL: key: ...").
Config load_config(const std::string& path, const std::vector<std::string>& overrides);

// The resolved configuration as YAML text, every key in table order (also what --dry-run prints).
std::string config_to_yaml(const Config& c);
// Every key's value as config_to_yaml prints it, by key path: what a checkpoint records, so that a
// resume can name the keys that changed.
std::map<std::string, std::string> config_values(const Config& c);
// The config a run had, from the values its checkpoint recorded (config_values): the defaults, then
// each recorded value as if given by --set (a key this program does not know keeps its default), then
// the checks of load_config. An error names `origin` (the checkpoint) and the key.
Config config_from_values(const std::map<std::string, std::string>& values, const std::string& origin);

// 64-bit digest of the resolved configuration text and the program version; ranks compare it.
uint64_t config_hash(const Config& c);

// The key table formatted for --help.
std::string config_keys_help();

}  // namespace amp
