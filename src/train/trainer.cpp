#include "train/trainer.h"

#include <sched.h>

#include <csignal>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <thread>

#include "comm/agree.h"
#include "train/checkpoint.h"
#include "train/signals.h"
#include "comm/comm_factory.h"
#include "core/convert.h"
#include "core/error.h"
#include "core/half.h"
#include "core/hash.h"

namespace amp {

namespace {

// Steps a process runs eagerly before capturing the step into a CUDA graph (first-use allocations
// and library set-up stay outside the graph).
constexpr int64_t kWarmupStepsBeforeCapture = 2;
constexpr int64_t kMaxTotalSteps = kMaxSteps;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

DType dtype_of(const std::string& p) { return p == "fp32" ? DType::F32 : p == "bf16" ? DType::BF16 : DType::F16; }
const char* precision_name(DType t) { return t == DType::F32 ? "fp32" : t == DType::BF16 ? "bf16" : "fp16"; }

// The CPUs this rank may use: those a binding launcher gave it, else its share of the node.
int cpus_per_rank(int local_size) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
  int allowed = hw;
  if (sched_getaffinity(0, sizeof set, &set) == 0) allowed = CPU_COUNT(&set);
  if (allowed < hw) return std::max(1, allowed);
  return std::max(1, hw / std::max(1, local_size));
}

// CPU threads per rank: what the config says, else all the CPUs of this rank.
int pick_threads(int64_t configured, int local_size) {
  return configured > 0 ? int(configured) : cpus_per_rank(local_size);
}

ScalerParams scaler_params_of(const Config& c) {
  ScalerParams p;
  const std::string mode = c.loss_scale_mode();
  p.mode = mode == "dynamic" ? ScaleMode::Dynamic : mode == "static" ? ScaleMode::Static : ScaleMode::None;
  const auto& ls = c.precision.loss_scale;
  p.init_scale = float(ls.init_scale);
  p.growth_factor = float(ls.growth_factor);
  p.backoff_factor = float(ls.backoff_factor);
  p.growth_interval = int32_t(std::min<int64_t>(ls.growth_interval, std::numeric_limits<int32_t>::max()));
  p.hysteresis = int32_t(std::min<int64_t>(ls.hysteresis, std::numeric_limits<int32_t>::max()));
  p.min_scale = float(ls.min_scale);
  p.max_scale = std::isinf(ls.max_scale) ? std::numeric_limits<float>::max() : float(ls.max_scale);
  return p;
}

OptimizerParams optimizer_params_of(const Config& c) {
  OptimizerParams p;
  const auto& o = c.optimizer;
  p.kind = o.type == "sgd" ? OptimizerKind::Sgd : OptimizerKind::AdamW;
  p.momentum = float(o.momentum);
  p.nesterov = o.nesterov;
  p.weight_decay = float(o.weight_decay);
  p.beta1 = float(o.beta1);
  p.beta2 = float(o.beta2);
  p.eps = float(o.eps);
  return p;
}

nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

}  // namespace

Trainer::Trainer(const Config& cfg, MpiCommunicator& world) : cfg_(cfg), world_(world) {
  rank_ = world.rank();
  nranks_ = world.size();
  setup();
}

Trainer::~Trainer() = default;

// Set-up in phases, so that no rank is ever left waiting for one that failed: local work first
// (no collective inside), agreed on at its end; then the collective parts, whose errors are either
// the same on every rank (agreed) or end the job at once (the NCCL bootstrap).
void Trainer::setup() {
  run_start_ = now_seconds();
  run_agreed(world_, [&] { setup_local(); });
  check_ranks_agree();
  {
    fail_setup_drill("comm");  // a rank failing here leaves the others inside the bootstrap: abort
    nccl_ = make_grad_communicator(cfg_.distributed.comm, world_, *be_);
    grad_comm_ = nccl_ ? nccl_.get() : static_cast<Communicator*>(&world_);
  }
  if (nranks_ > 1) {
    reducer_ = std::make_unique<GradReducer>(
        *grad_comm_, *be_, spans_, model_->layout().total, compute_, grads_.data(),
        size_t(cfg_.distributed.first_bucket_mb * 1048576.0), size_t(cfg_.distributed.bucket_mb * 1048576.0),
        flags_dev_ + OverflowFlags::kRank0 + rank_);
    // Overlap needs a core for the communication thread: on a CPU rank whose cores all compute,
    // the all-reduce would only steal time from backward, so it runs after it instead.
    const std::string& ov = cfg_.distributed.overlap;
    const int threads = pick_threads(cfg_.run.threads, world_.local_size());
    reducer_->set_overlap(ov == "on" ||
                          (ov == "auto" && (!be_->host_accessible() || cpus_per_rank(world_.local_size()) > threads)));
  }

  // Parameters: rank 0's initialization is everyone's.
  const ParamLayout& L = model_->layout();
  std::vector<float> init = model_->init_params(cfg_.model.init, cfg_.model.init_std, uint64_t(cfg_.run.seed));
  world_.broadcast(view_of(init.data(), init.size()), 0);
  be_->upload(master_.data(), init.data(), L.total * sizeof(float));
  if (compute_ != DType::F32) be_->cast(master_.data(), DType::F32, lp_.data(), compute_, L.total);

  const bool lead = rank_ == 0;
  progress_ = std::make_unique<Progress>(cfg_.run.progress, lead);
  run_agreed(world_, [&] { setup_output(); });
  if (cfg_.checkpoint.resume != "none") resume();
  // A resumed run keeps the records up to its checkpoint and appends after them.
  run_agreed(world_, [&] {
    if (lead && start_step_ > 1) truncate_metrics(cfg_.resolved_out_dir() + "/metrics.jsonl", start_step_ - 1);
    metrics_ = std::make_unique<MetricsWriter>(cfg_.resolved_out_dir(), lead, start_step_ > 1);
    metrics_->write_text("config.yaml", config_to_yaml(cfg_));
  });
  if (cfg_.checkpoint.on_signal) install_stop_signals();
  if (lead) {
    if (!resumed_from_.empty())
      progress_->message(strcat("resumed from ", resumed_from_, " at step ", start_step_ - 1, " (scale ", seen_.scaler.scale,
                                ", ", seen_.scaler.overflow_steps, " skipped so far)"));
    progress_->message(strcat("amp_ddp ", AMP_VERSION, " | ", nranks_, " rank(s) x ", be_->name(), " | ",
                              precision_name(compute_), " compute, loss scale ", cfg_.loss_scale_mode(), " | ",
                              L.n_params(), " parameters | global batch ", sampler_->global_batch(), " | ",
                              total_steps_, " steps (", sampler_->steps_per_epoch(), " per epoch) | out ",
                              cfg_.resolved_out_dir()));
  }
}

void Trainer::fail_setup_drill(const char* phase) {
  for (const FaultSpec& f : cfg_.faults.fail_setup)
    if (f.rank == rank_ && f.value == phase)
      throw Error(ErrorKind::Internal, strcat("faults.fail_setup: set-up phase \"", phase, "\" failed on rank ", rank_,
                                              " (drill)"));
}

void Trainer::setup_local() {
  fail_setup_drill("backend");
  const int threads = pick_threads(cfg_.run.threads, world_.local_size());
  be_ = make_backend(cfg_.run.device, world_.local_rank(), threads);
  // Faults are planted from the host in the middle of a step: such runs are not captured.
  use_graph_ = cfg_.run.cuda_graph && cfg_.faults.inject_nonfinite.empty();
  compute_ = dtype_of(cfg_.precision.compute);

  fail_setup_drill("data");
  data_ = load_datasets(cfg_);
  data_digest_ = dataset_digest(data_.train, dataset_digest(data_.eval, 0));
  classification_ = data_.train.task == Task::Classification;
  n_out_ = data_.train.n_outputs();
  batch_ = size_t(cfg_.data.batch_size);
  sampler_ = std::make_unique<ShardedSampler>(data_.train.n, batch_, rank_, nranks_, uint64_t(cfg_.run.seed),
                                              cfg_.data.shuffle);
  const int64_t spe = int64_t(sampler_->steps_per_epoch());
  total_steps_ = cfg_.run.steps;
  if (total_steps_ == 0) {
    if (cfg_.run.epochs > kMaxTotalSteps / spe)
      throw Error(ErrorKind::Config, strcat("config error: ", cfg_.origin.at("run.epochs"), ": run.epochs: ",
                                            cfg_.run.epochs, " epochs of ", spe, " steps are more than ",
                                            kMaxTotalSteps, " steps; set fewer epochs (or run.steps)"));
    total_steps_ = cfg_.run.epochs * spe;
  }

  std::vector<size_t> dims{data_.train.n_features};
  for (int64_t h : cfg_.model.hidden) dims.push_back(size_t(h));
  dims.push_back(n_out_);
  // Evaluation batches never exceed this rank's share of the evaluation set.
  size_t eval_begin = 0, eval_end = 0;
  eval_shard(data_.eval.n, rank_, nranks_, eval_begin, eval_end);
  max_batch_ = std::max(batch_, std::min(size_t(cfg_.data.eval_batch_size), eval_end - eval_begin));
  check_memory(dims, max_batch_);
  const Activation act = cfg_.model.activation == "gelu" ? Activation::Gelu : Activation::Relu;
  model_ = std::make_unique<Mlp>(*be_, dims, act, compute_, max_batch_);
  const ParamLayout& L = model_->layout();
  spans_ = L.spans();

  // Faults planted by this rank; tensor names are checked here, ranks at start-up.
  for (const FaultSpec& f : cfg_.faults.inject_nonfinite) {
    if (f.rank >= nranks_)
      throw Error(ErrorKind::Config, strcat("config error: faults.inject_nonfinite: rank ", f.rank,
                                            " does not exist in a run of ", nranks_, " rank(s)"));
    if (!f.tensor.empty() && L.index_of(f.tensor) < 0)
      throw Error(ErrorKind::Config, strcat("config error: faults.inject_nonfinite: no parameter tensor \"", f.tensor,
                                            "\" (the model has ", L.names(), ")"));
    if (f.rank == rank_) my_faults_.push_back(f);
  }

  const size_t n = L.total;
  master_ = be_->alloc(n * sizeof(float));
  if (compute_ != DType::F32) lp_ = be_->alloc(n * dtype_size(compute_));
  grads_ = be_->alloc(n * dtype_size(compute_));
  g32_ = be_->alloc(n * sizeof(float));
  opt_params_ = optimizer_params_of(cfg_);
  const bool adam = opt_params_.kind == OptimizerKind::AdamW;
  if (adam || opt_params_.momentum != 0.0f) state1_ = be_->alloc(n * sizeof(float));
  if (adam) state2_ = be_->alloc(n * sizeof(float));

  scaler_params_ = scaler_params_of(cfg_);
  StepScalarsDev init_scalars;
  init_scalars.scaler = scaler_init(scaler_params_);
  scalars_ = be_->alloc(sizeof(StepScalarsDev));
  be_->upload(scalars_.data(), &init_scalars, sizeof init_scalars);
  dev_ = scalars_.as<StepScalarsDev>();
  seen_ = init_scalars;
  flags_ = be_->alloc(OverflowFlags::count(nranks_) * sizeof(int32_t));
  flags_dev_ = flags_.as<int32_t>();
  check_flag_ = be_->alloc(sizeof(int32_t));

  const size_t in = dims.front();
  x_host_.resize(max_batch_ * in);
  x_stage_ = be_->alloc(max_batch_ * in * sizeof(float));
  if (compute_ != DType::F32) x_lp_ = be_->alloc(max_batch_ * in * dtype_size(compute_));
  if (classification_) {
    labels_host_.resize(max_batch_);
    labels_ = be_->alloc(max_batch_ * sizeof(int32_t));
  } else {
    targets_host_.resize(max_batch_ * n_out_);
    targets_ = be_->alloc(max_batch_ * n_out_ * sizeof(float));
  }

  schedule_.kind = cfg_.optimizer.schedule == "warmup_cosine" ? LrSchedule::Kind::WarmupCosine : LrSchedule::Kind::Constant;
  schedule_.lr = cfg_.optimizer.lr;
  schedule_.min_lr = cfg_.optimizer.min_lr;
  schedule_.warmup_steps = cfg_.optimizer.warmup_steps;
  schedule_.total_steps = total_steps_;
}

// What a rank holds for training, in bytes, against what it may allocate: a model too large for
// the machine is a config error naming model.hidden, not an allocation failure (or an overflowed
// size) somewhere inside.
void Trainer::check_memory(const std::vector<size_t>& dims, size_t max_batch) const {
  const size_t lp = dtype_size(compute_);
  // parameters: FP32 master + FP32 gradient + moments, 16-bit working copy and gradient
  const size_t per_param = 4 + 4 + 8 + 2 * lp;
  size_t params = 0, widest = 0, activations = 0, largest_weight = 0;
  bool overflow = false;
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    size_t w = 0;
    overflow |= __builtin_mul_overflow(dims[i], dims[i + 1], &w);
    overflow |= __builtin_add_overflow(params, w + dims[i + 1], &params);
    largest_weight = std::max(largest_weight, w);
  }
  for (size_t d : dims) {
    widest = std::max(widest, d);
    overflow |= __builtin_add_overflow(activations, d, &activations);
  }
  size_t bytes = 0, act_bytes = 0, t = 0;
  overflow |= __builtin_mul_overflow(params, per_param, &bytes);
  // activations and their gradients (compute dtype), inputs (FP32 + compute dtype), FP32 scratch
  overflow |= __builtin_mul_overflow(max_batch, 2 * activations + 3 * widest, &t);
  overflow |= __builtin_mul_overflow(t, lp + 4, &act_bytes);
  overflow |= __builtin_add_overflow(bytes, act_bytes, &bytes);
  overflow |= __builtin_mul_overflow(largest_weight, size_t(8), &t);
  overflow |= __builtin_add_overflow(bytes, t, &bytes);
  const size_t avail = be_->memory_available(world_.local_size());
  if (overflow || (avail > 0 && bytes > avail)) {
    const std::string need = overflow ? std::string("more than 16 EiB") : format_bytes(double(bytes));
    throw Error(ErrorKind::Config,
                strcat("config error: ", cfg_.origin.at("model.hidden"), ": model.hidden: a model of layer widths ",
                       dims.front(), "-...-", dims.back(), " (", overflow ? std::string("overflowing") : std::to_string(params),
                       " parameters) at batch ", max_batch, " needs ", need, " per rank; this rank may use ",
                       format_bytes(double(avail)), "; make the model or data.batch_size / data.eval_batch_size smaller"));
  }
}

// Every rank must run the same program on the same config and the same data.
void Trainer::check_ranks_agree() {
  uint64_t rank0 = 0;
  std::string differ = ranks_differing_from_0(config_hash(cfg_), &rank0);
  if (!differ.empty())
    throw Error(ErrorKind::Comm,
                "communication error: ranks disagree on the configuration: rank(s) " + differ +
                    " resolved a different config (or program version) than rank 0 (" + hex64(rank0) +
                    "); start every rank with the same config, --set and binary",
                true);
  differ = ranks_differing_from_0(data_digest_, &rank0);
  if (!differ.empty())
    throw Error(ErrorKind::Data,
                strcat("data error: rank(s) ", differ, " loaded different data than rank 0 (digest ", hex64(rank0),
                       ") from the same paths (", data_.train.source,
                       "): each node must hold identical copies of the data files"),
                true);
}

// Rank 0 owns the run folders: a lock so that no second run writes into them, and a check that
// they are writable with room for a checkpoint, before any training time is spent.
void Trainer::setup_output() {
  fail_setup_drill("output");
  if (rank_ != 0) return;
  const std::string out = cfg_.resolved_out_dir(), ck = cfg_.resolved_checkpoint_dir();
  locks_.push_back(std::make_unique<RunDirLock>(out, "run.out_dir"));
  check_writable(out, "run.out_dir", 1 << 20);
  const bool writes_ckpt = cfg_.checkpoint.final || cfg_.checkpoint.interval > 0 || cfg_.checkpoint.on_signal;
  if (!writes_ckpt) return;
  std::error_code ec;
  const bool inside = std::filesystem::weakly_canonical(ck, ec).string().rfind(
                          std::filesystem::weakly_canonical(out, ec).string() + "/", 0) == 0;
  if (!inside) locks_.push_back(std::make_unique<RunDirLock>(ck, "checkpoint.dir"));
  // A checkpoint: masters and optimizer state (FP32), the header; the temporary file is written
  // beside the previous ones before the oldest is removed.
  const size_t states = (state1_.data() ? 1 : 0) + (state2_.data() ? 1 : 0);
  const uint64_t ckpt_bytes = uint64_t(model_->layout().total) * 4 * (1 + states) + (1 << 20);
  check_writable(ck, "checkpoint.dir", ckpt_bytes);
}

namespace {

nlohmann::json layout_json(const ParamLayout& L) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& t : L.tensors) j.push_back({{"name", t.name}, {"rows", t.rows}, {"cols", t.cols}});
  return j;
}

template <typename T>
std::vector<char> bytes_of(const T* p, size_t n) {
  const char* c = reinterpret_cast<const char*>(p);
  return std::vector<char>(c, c + n * sizeof(T));
}

// A header field the trainer reads: missing -> fallback; present with the wrong type -> a
// Checkpoint error naming it (never a json exception).
template <typename T>
T header_field(const Checkpoint& ck, const char* key, T fallback) {
  const auto it = ck.header.find(key);
  if (it == ck.header.end()) return fallback;
  bool ok = false;
  if constexpr (std::is_same_v<T, std::string>) ok = it->is_string();
  else if constexpr (std::is_integral_v<T>) ok = it->is_number_integer();
  else ok = it->is_number();
  if (!ok)
    throw Error(ErrorKind::Checkpoint, strcat("checkpoint error: ", ck.path, ": header field \"", key, "\" has the wrong type (",
                                              it->type_name(), ")"));
  return it->get<T>();
}

// The step of a checkpoint file from its name (ckpt_step<digits>.bin); -1 if it has none.
int64_t step_of_name(const std::string& path) {
  const std::string name = std::filesystem::path(path).filename().string();
  const std::string prefix = "ckpt_step";
  if (name.rfind(prefix, 0) != 0) return -1;
  errno = 0;
  char* end = nullptr;
  const long long step = std::strtoll(name.c_str() + prefix.size(), &end, 10);
  if (errno == ERANGE || end == name.c_str() + prefix.size() || std::string(end) != ".bin" || step < 0) return -1;
  return int64_t(step);
}

}  // namespace

std::string Trainer::save(int64_t step) {
  check_finite_weights(step);  // never write a checkpoint that holds NaN weights
  StepScalarsDev scal;
  be_->download(&scal, dev_, sizeof scal);
  // Each rank's half-finished interval sums differ: every rank gets its own back on resume, so the
  // logged losses after a resume are the uninterrupted run's, bit for bit.
  const RankIntervalSums mine{scal.loss_sum, scal.correct};
  std::vector<RankIntervalSums> sums(static_cast<size_t>(nranks_));
  world_.allgather(&mine, sums.data(), sizeof mine);
  std::string path;
  run_agreed(world_, [&] {
    if (rank_ == 0) path = write_checkpoint(step, scal, sums);
  });
  return path;
}

std::string Trainer::write_checkpoint(int64_t step, const StepScalarsDev& scal, const std::vector<RankIntervalSums>& sums) {
  const size_t n = model_->layout().total;
  Checkpoint ck;
  std::vector<float> host(n);
  auto grab = [&](const Buffer& b, const char* name) {
    if (!b.data()) return;
    be_->download(host.data(), b.data(), n * sizeof(float));
    ck.sections[name] = bytes_of(host.data(), n);
  };
  grab(master_, "master");
  grab(state1_, "state1");
  grab(state2_, "state2");
  ck.sections["scalars"] = bytes_of(&scal, 1);
  ck.sections["rank_sums"] = bytes_of(sums.data(), sums.size());
  ck.header = {{"program", "amp_ddp"},
               {"version", AMP_VERSION},
               {"step", step},
               {"epoch", double(step) / double(sampler_->steps_per_epoch())},
               {"world_size", nranks_},
               {"global_batch", sampler_->global_batch()},
               {"precision", precision_name(compute_)},
               {"optimizer", cfg_.optimizer.type},
               {"loss_scale_mode", cfg_.loss_scale_mode()},
               {"config_hash", hex64(config_hash(cfg_))},
               {"params_hash", hex64(hash64(ck.sections["master"].data(), ck.sections["master"].size()))},
               {"layout", layout_json(model_->layout())},
               {"scaler", {{"scale", scal.scaler.scale},
                           {"growth_tracker", scal.scaler.growth_tracker},
                           {"hysteresis_left", scal.scaler.hysteresis_left},
                           {"overflow_steps", scal.scaler.overflow_steps},
                           {"optimizer_steps", scal.scaler.optimizer_steps}}},
               {"interval_steps", interval_steps_},
               {"first_loss", first_loss_},
               {"last_eval_loss", last_eval_loss_},
               {"last_eval_accuracy", last_eval_acc_},
               {"train_seconds", train_seconds_},
               {"sizeof_scalars", sizeof(StepScalarsDev)}};
  return save_checkpoint(cfg_.resolved_checkpoint_dir(), ck, int(cfg_.checkpoint.keep));
}

void Trainer::resume() {
  // Rank 0 finds, reads and checks the checkpoint; every rank receives its bytes (no shared
  // file system needed). Status first, so no rank waits for bytes that never come.
  int64_t head[2] = {0, 0};  // status (0 ok, -1 nothing to resume, > 0 exit code), bytes
  std::string data, path, message;
  if (rank_ == 0) {
    try {
      const std::string dir = cfg_.resolved_checkpoint_dir();
      if (cfg_.checkpoint.resume == "auto") {
        std::vector<std::string> skipped;
        path = find_latest_intact(dir, &skipped);
        for (const auto& s : skipped) progress_->message("skipping " + s);
        if (path.empty()) {
          progress_->message("checkpoint.resume is auto but " + dir + " holds no intact checkpoint: starting from step 1");
          head[0] = -1;
        }
      } else {
        path = cfg_.checkpoint.resume;
      }
      if (head[0] == 0) {
        data = read_file_bytes(path);
        const Checkpoint ck = parse_checkpoint(data, path);
        auto mismatch = [&](const std::string& what, const nlohmann::json& theirs, const nlohmann::json& ours) {
          const auto brief = [](const nlohmann::json& j) {  // a crafted header can be long
            const std::string t = j.dump();
            return t.size() > 240 ? t.substr(0, 240) + "..." : t;
          };
          throw Error(ErrorKind::Checkpoint, strcat("checkpoint error: ", path, ": written by a run with ", what, " ",
                                                    brief(theirs), ", this run has ", brief(ours)));
        };
        const int64_t world = header_field<int64_t>(ck, "world_size", -1);
        if (world != nranks_) mismatch("world size", world, nranks_);
        const nlohmann::json layout = ck.header.contains("layout") ? ck.header["layout"] : nlohmann::json();
        if (layout != layout_json(model_->layout()))
          mismatch("another model: parameter tensors", layout, layout_json(model_->layout()));
        const std::string prec = header_field<std::string>(ck, "precision", "");
        if (prec != precision_name(compute_)) mismatch("precision", prec, precision_name(compute_));
        const std::string opt = header_field<std::string>(ck, "optimizer", "");
        if (opt != cfg_.optimizer.type) mismatch("optimizer", opt, cfg_.optimizer.type);
        if (header_field<int64_t>(ck, "sizeof_scalars", 0) != int64_t(sizeof(StepScalarsDev)))
          mismatch("a different scaler-state layout (program version)", header_field<std::string>(ck, "version", ""),
                   AMP_VERSION);
        if (ck.step() > total_steps_)
          throw Error(ErrorKind::Checkpoint,
                      strcat("checkpoint error: ", path, ": it is at step ", ck.step(), ", beyond this run's ", total_steps_,
                             " steps; raise run.steps (or run.epochs) to train on from it, or start the new run in "
                             "another run.out_dir / checkpoint.dir"));
        if (header_field<std::string>(ck, "config_hash", "") != hex64(config_hash(cfg_)))
          progress_->message("note: " + path + " was written with a different configuration; continuing with this one");
        head[1] = int64_t(data.size());
      }
    } catch (const Error& e) {
      head[0] = e.exit_code();
      message = e.what();
    }
  }
  world_.broadcast(BufView{head, sizeof head, DType::U8}, 0);
  if (head[0] > 0)  // every rank stops; rank 0 has the message and main() prints it
    throw Error(static_cast<ErrorKind>(head[0]), rank_ == 0 ? message : "rank 0 could not resume", true);
  if (head[0] < 0) return;
  data.resize(size_t(head[1]));
  world_.broadcast(BufView{data.data(), data.size(), DType::U8}, 0);
  int64_t step = 0;
  run_agreed(world_, [&] {
    fail_setup_drill("resume");
    const Checkpoint ck = parse_checkpoint(data, path.empty() ? "checkpoint from rank 0" : path);
    apply_checkpoint(ck, path);
    step = ck.step();
  });
  if (rank_ == 0) set_aside_newer_checkpoints(step);
  if (rank_ == 0 && step == total_steps_)
    progress_->message(strcat("the checkpoint is at step ", step, ", the last of this run (run.steps): nothing left to train"));
}

// Loads a verified checkpoint into this rank's state; every field is checked before it is used.
void Trainer::apply_checkpoint(const Checkpoint& ck, const std::string& path) {
  auto bad = [&](const std::string& what) {
    throw Error(ErrorKind::Checkpoint, strcat("checkpoint error: ", path, ": ", what));
  };
  const size_t n = model_->layout().total;
  auto section = [&](const char* name, size_t bytes) -> const std::vector<char>& {
    auto it = ck.sections.find(name);
    if (it == ck.sections.end()) bad(strcat("section \"", name, "\" is missing"));
    if (it->second.size() != bytes)
      bad(strcat("section \"", name, "\" has ", it->second.size(), " bytes, this run needs ", bytes));
    return it->second;
  };
  const std::vector<char>& master = section("master", n * sizeof(float));
  for (size_t i = 0; i < n; ++i) {
    float w;
    std::memcpy(&w, master.data() + i * sizeof(float), sizeof w);
    if (!std::isfinite(w)) bad(strcat("master weight ", i, " is not finite (", w, "): the run it comes from had diverged"));
  }
  be_->upload(master_.data(), master.data(), master.size());
  for (auto [buf, name] : {std::pair<Buffer*, const char*>{&state1_, "state1"}, {&state2_, "state2"}}) {
    if (!buf->data()) continue;
    const std::vector<char>& s = section(name, n * sizeof(float));
    be_->upload(buf->data(), s.data(), s.size());
  }
  if (compute_ != DType::F32) be_->cast(master_.data(), DType::F32, lp_.data(), compute_, n);

  const int64_t step = ck.step();
  StepScalarsDev scal;
  std::memcpy(&scal, section("scalars", sizeof scal).data(), sizeof scal);
  const ScalerState& sc = scal.scaler;
  if (!(std::isfinite(sc.scale) && sc.scale > 0) || sc.overflow_steps < 0 || sc.optimizer_steps < 0 ||
      sc.iterations != step || sc.overflow_steps + sc.optimizer_steps != step)
    bad(strcat("the loss-scaler state (scale ", sc.scale, ", ", sc.overflow_steps, " skipped + ", sc.optimizer_steps,
               " applied of ", sc.iterations, " steps) does not fit step ", step));
  // Every rank continues its own half-finished log interval.
  const auto& rs = section("rank_sums", size_t(nranks_) * sizeof(RankIntervalSums));
  RankIntervalSums mine;
  std::memcpy(&mine, rs.data() + size_t(rank_) * sizeof mine, sizeof mine);
  scal.loss_sum = mine.loss_sum;
  scal.correct = mine.correct;
  // A changed loss-scale mode applies from here on: the new mode starts from its initial state; the
  // step counters (AdamW's bias correction counts applied steps) carry on.
  const std::string mode_then = header_field<std::string>(ck, "loss_scale_mode", "");
  const std::string mode_now = cfg_.loss_scale_mode();
  const bool static_changed = mode_now == "static" && sc.scale != float(cfg_.precision.loss_scale.init_scale);
  if (!mode_then.empty() && (mode_then != mode_now || static_changed)) {
    const ScalerState fresh = scaler_init(scaler_params_);
    if (rank_ == 0)
      progress_->message(strcat("note: the checkpoint's loss scaling was ", mode_then, " (scale ", sc.scale,
                                "); this run's is ", mode_now, " (scale ", fresh.scale, "): the new one applies from step ",
                                step + 1));
    scal.scaler.scale = fresh.scale;
    scal.scaler.growth_tracker = fresh.growth_tracker;
    scal.scaler.hysteresis_left = fresh.hysteresis_left;
    scal.scaler.overflow_at_min = 0;
  } else if (mode_now == "dynamic") {  // new clamps apply to the scale carried over
    scal.scaler.scale = std::min(std::max(scal.scaler.scale, scaler_params_.min_scale), scaler_params_.max_scale);
  }
  seen_ = scal;
  be_->upload(dev_, &seen_, sizeof seen_);

  const int64_t interval = header_field<int64_t>(ck, "interval_steps", 0);
  if (interval < 0 || interval > step) bad(strcat("header field \"interval_steps\" is ", interval, " at step ", step));
  start_step_ = step + 1;
  interval_steps_ = interval;
  first_loss_ = header_field<double>(ck, "first_loss", 0.0);
  last_eval_loss_ = header_field<double>(ck, "last_eval_loss", -1.0);
  last_eval_acc_ = header_field<double>(ck, "last_eval_accuracy", -1.0);
  train_seconds_ = header_field<double>(ck, "train_seconds", 0.0);
  resumed_from_ = path;
}

// After a roll-back to an older checkpoint, the newer ones belong to the run this one replaces:
// they are moved to abandoned/ (kept, not deleted), so that resume=auto and checkpoint.keep see
// only this run's line of checkpoints.
void Trainer::set_aside_newer_checkpoints(int64_t step) {
  const std::string dir = cfg_.resolved_checkpoint_dir();
  std::vector<std::string> moved;
  for (const std::string& p : list_checkpoints(dir)) {
    if (step_of_name(p) <= step) continue;
    const std::filesystem::path to = std::filesystem::path(dir) / "abandoned" / std::filesystem::path(p).filename();
    std::error_code ec;
    std::filesystem::create_directories(to.parent_path(), ec);
    if (!ec) std::filesystem::rename(p, to, ec);
    if (ec) progress_->message(strcat("warning: could not move ", p, " (newer than the resumed step ", step, ") aside: ",
                                      ec.message(), "; resume=auto would pick it"));
    else moved.push_back(std::filesystem::path(p).filename().string());
  }
  if (!moved.empty()) {
    std::string list;
    for (const auto& m : moved) list += (list.empty() ? "" : ", ") + m;
    progress_->message(strcat("moved ", moved.size(), " checkpoint(s) newer than step ", step, " (from the run this one replaces) to ",
                              dir, "/abandoned/: ", list));
  }
}

Trainer::Stop Trainer::stop_requested(int64_t step) {
  for (const FaultSpec& f : cfg_.faults.raise_signal)
    if (f.step == step && f.rank == rank_) raise_stop_signal(f.value == "USR1" ? SIGUSR1 : SIGTERM);
  int32_t why = metrics_ && !metrics_->failure().empty()            ? int32_t(Stop::OutputFailed)
                : cfg_.checkpoint.on_signal && stop_signal() != 0 ? int32_t(Stop::Signal)
                                                                  : int32_t(Stop::None);
  if (nranks_ > 1) world_.allreduce(BufView{&why, 1, DType::I32}, ReduceOp::Max);
  return Stop(why);
}

void Trainer::check_finite_weights(int64_t step) {
  be_->zero(check_flag_.data(), sizeof(int32_t));
  be_->find_nonfinite(master_.data(), DType::F32, spans_, 0, model_->layout().total, check_flag_.as<int32_t>());
  int32_t bad = 0;
  be_->download(&bad, check_flag_.data(), sizeof bad);
  // Every rank holds the same weights; the MAX makes the verdict common even if they drifted.
  if (nranks_ > 1) world_.allreduce(BufView{&bad, 1, DType::I32}, ReduceOp::Max);
  if (bad > 0)
    throw Error(ErrorKind::Divergence,
                strcat("divergence error: after step ", step, " the FP32 master weights of ",
                       model_->layout().tensors[size_t(bad - 1)].name,
                       " are not finite: an update overflowed. Lower optimizer.lr or enable optimizer.grad_clip"),
                true);
}

void Trainer::check_loss(int64_t step, double loss) {
  if (!std::isfinite(loss))
    throw Error(ErrorKind::Divergence,
                strcat("divergence error: the mean training loss of the interval ending at step ", step, " is ", loss,
                       " (the forward pass overflowed or the weights diverged). Lower optimizer.lr, enable "
                       "optimizer.grad_clip, or use bf16"),
                true);
  const double ratio = cfg_.run.max_loss_ratio;
  if (ratio > 0 && first_loss_ > 0 && loss > ratio * first_loss_)
    throw Error(ErrorKind::Divergence,
                strcat("divergence error: the mean training loss reached ", loss, " at step ", step, ", more than ", ratio,
                       " times the loss of step 1 (", first_loss_,
                       "; run.max_loss_ratio). Lower optimizer.lr or enable optimizer.grad_clip"),
                true);
}

// The loss of step 1, before any update: what run.max_loss_ratio compares with. Read once, right
// after step 1 (the interval sums hold only that step then).
void Trainer::record_first_loss() {
  StepScalarsDev now;
  be_->download(&now, dev_, sizeof now);
  float sums[2] = {now.loss_sum, float(int64_t(batch_) * int64_t(classification_ ? 1 : n_out_))};
  if (nranks_ > 1) world_.allreduce(view_of(sums, 2), ReduceOp::Sum);
  first_loss_ = double(sums[0]) / double(sums[1]);
}

std::vector<float> Trainer::master_weights() {
  std::vector<float> w(model_->layout().total);
  be_->download(w.data(), master_.data(), w.size() * sizeof(float));
  return w;
}

uint64_t Trainer::params_hash() {
  const std::vector<float> w = master_weights();
  return hash64(w.data(), w.size() * sizeof(float));
}

void Trainer::plant_fault(int64_t step, int tensor) {
  for (const FaultSpec& f : my_faults_) {
    if (f.step != step) continue;
    const int target = f.tensor.empty() ? 0 : model_->layout().index_of(f.tensor);
    if (target != tensor) continue;
    const float v = f.value == "nan" ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
    char bits[4];
    convert(&v, DType::F32, bits, compute_, 1);
    be_->upload(static_cast<char*>(grads_.data()) + spans_[size_t(tensor)].offset * dtype_size(compute_), bits,
                dtype_size(compute_));
  }
}

void Trainer::upload_inputs(int64_t step) {
  const std::vector<uint32_t>& idx = sampler_->batch(step - 1);
  const size_t in = data_.train.n_features;
  for (size_t i = 0; i < batch_; ++i) {
    const size_t s = idx[i];
    std::memcpy(&x_host_[i * in], &data_.train.x[s * in], in * sizeof(float));
    if (classification_) labels_host_[i] = data_.train.labels[s];
    else std::memcpy(&targets_host_[i * n_out_], &data_.train.y[s * n_out_], n_out_ * sizeof(float));
  }
  be_->upload(x_stage_.data(), x_host_.data(), batch_ * in * sizeof(float));
  if (classification_) be_->upload(labels_.data(), labels_host_.data(), batch_ * sizeof(int32_t));
  else be_->upload(targets_.data(), targets_host_.data(), batch_ * n_out_ * sizeof(float));
  const float lr = float(schedule_.at(step));
  be_->upload(&dev_->lr, &lr, sizeof lr);
}

// One step: inputs, then the device part, captured once into a graph where the backend can.
void Trainer::train_step(int64_t step) {
  world_.set_step(step);
  grad_comm_->check_async_errors();
  if (reducer_) take_comm_stats();  // the previous step's, read before this one is enqueued
  // A device backend's host waits inside a step are waits on the collectives enqueued with it.
  Watchdog::Detail device_detail;
  device_detail.note = "its kernels and NCCL collectives";
  Watchdog::Wait device_wait(be_->host_accessible() ? nullptr : world_.watchdog(), "the device step", device_detail);
  upload_inputs(step);
  if (graph_ready_) {
    be_->replay();
    return;
  }
  // Capture after two warm-up steps of this process (first-use allocations and library set-up
  // stay outside), so a resumed run is captured too.
  const bool capture = use_graph_ && step == start_step_ + kWarmupStepsBeforeCapture && be_->begin_capture();
  device_step(step);
  if (capture) {
    be_->end_capture();
    be_->replay();
    graph_ready_ = true;
  }
}

// The reducer's timing of the latest measured step (device backends measure with events and report
// a step once it has completed, so a measurement may arrive a step late or not at all).
void Trainer::take_comm_stats() {
  const ReducerStats& rs = reducer_->last_step();
  comm_bytes_ = rs.bytes;
  if (rs.measured == comm_measured_) return;
  comm_measured_ = rs.measured;
  comm_seconds_ += rs.comm_seconds;
  exposed_seconds_ += rs.exposed_seconds;
  ++comm_steps_;
}

void Trainer::device_step(int64_t step) {
  const size_t in = data_.train.n_features;
  Tensor x = x_stage_.tensor(DType::F32, batch_, in);
  if (compute_ != DType::F32) {
    be_->cast(x_stage_.data(), DType::F32, x_lp_.data(), compute_, batch_ * in);
    x = x_lp_.tensor(compute_, batch_, in);
  }
  be_->zero(flags_dev_, OverflowFlags::count(nranks_) * sizeof(int32_t));

  const void* params = compute_ == DType::F32 ? master_.data() : lp_.data();
  const Tensor logits = model_->forward(x, params, batch_);
  const Tensor dlogits = model_->dlogits(batch_);
  // The backward seed: the loss scale times the 1/N of the mean over the global batch, so the
  // all-reduce is a plain sum of pre-divided gradients (it cannot overflow where the mean would not).
  const float* scale = &dev_->scaler.scale;
  if (classification_) {
    const float inv_count = float(cfg_.model.loss_weight / double(batch_ * size_t(nranks_)));
    be_->softmax_xent(logits, labels_.as<int32_t>(), scale, inv_count, dlogits, &dev_->loss_sum, &dev_->correct);
  } else {
    const float inv_count = float(cfg_.model.loss_weight / double(batch_ * size_t(nranks_) * n_out_));
    be_->mse(logits, targets_.tensor(DType::F32, batch_, n_out_), scale, inv_count, dlogits, &dev_->loss_sum);
  }

  if (reducer_) reducer_->begin_step();
  model_->backward(dlogits, params, grads_.data(), batch_, [&](int t) {
    if (!my_faults_.empty()) plant_fault(step, t);
    if (reducer_) reducer_->tensor_ready(t);
  });
  if (reducer_) reducer_->finish();

  // One fused pass: unscale into FP32, find non-finite values, squared norm.
  be_->unscale_check(grads_.data(), compute_, spans_, scale, g32_.as<float>(), flags_dev_, &dev_->norm_sq);
  // The global overflow flag (and who saw what): every rank skips or steps together.
  if (nranks_ > 1) grad_comm_->allreduce(BufView{flags_dev_, OverflowFlags::count(nranks_), DType::I32}, ReduceOp::Max);

  be_->optimizer_step(opt_params_, &dev_->lr, float(cfg_.optimizer.grad_clip), master_.as<float>(), g32_.as<float>(),
                      state1_.as<float>(), state2_.as<float>(), model_->layout().total,
                      compute_ == DType::F32 ? nullptr : lp_.data(), compute_, flags_dev_, &dev_->norm_sq,
                      &dev_->scaler);
  be_->update_scale(&dev_->scaler, scaler_params_, flags_dev_, nranks_);
}

std::string Trainer::overflow_where(const ScalerState& s) const {
  const auto name = [&](int32_t t1) {
    return t1 > 0 && size_t(t1) <= spans_.size() ? model_->layout().tensors[size_t(t1 - 1)].name : std::string("?");
  };
  if (s.last_overflow_tensor == OverflowFlags::kNormOverflow)
    return "the global gradient norm (every gradient finite, their norm beyond FP32, so grad_clip cannot clip)";
  if (s.last_overflow_rank >= 0)
    return strcat(name(s.last_overflow_rank_tensor), " on rank ", s.last_overflow_rank);
  if (nranks_ > 1) return strcat(name(s.last_overflow_tensor), " after the all-reduce (the 16-bit sum overflowed)");
  return name(s.last_overflow_tensor);
}

// Reads the step scalars (every step where that is free, only at log steps on device backends),
// reports skipped steps and stops a diverged run.
void Trainer::observe(int64_t step, bool force_log) {
  const bool log_step = force_log || step % cfg_.run.log_interval == 0 || step == total_steps_;
  const bool telemetry = cfg_.precision.telemetry_interval > 0 && step % cfg_.precision.telemetry_interval == 0;
  if (!log_step && !telemetry && !be_->host_accessible()) return;
  StepScalarsDev now;
  be_->download(&now, dev_, sizeof now);
  const ScalerState& s = now.scaler;
  const int64_t new_skips = s.overflow_steps - seen_.scaler.overflow_steps;
  if (new_skips > 0 && rank_ == 0) {
    const std::string count = new_skips == 1 ? "" : strcat(" (", new_skips, " skipped since step ", seen_.scaler.iterations, ")");
    progress_->message(strcat("step ", s.last_overflow_iteration, ": non-finite gradients in ", overflow_where(s),
                              " | step skipped on every rank | scale ", seen_.scaler.scale, " -> ", s.scale, count));
  }
  if (s.overflow_at_min >= cfg_.precision.loss_scale.divergence_steps) {
    throw Error(ErrorKind::Divergence,
                strcat("divergence error: training diverged at step ", s.last_overflow_iteration, ": gradients were non-finite for ",
                       s.overflow_at_min, " consecutive steps with the loss scale at its minimum (", s.scale,
                       "); last in ", overflow_where(s),
                       ". Lower optimizer.lr, enable optimizer.grad_clip, or use bf16"),
                true);
  }
  if (telemetry) {
    const auto stats = be_->grad_stats(grads_.data(), compute_, spans_);
    nlohmann::json t = nlohmann::json::object();
    for (size_t i = 0; i < stats.size(); ++i)
      t[model_->layout().tensors[i].name] = {{"zero_frac", stats[i].zero_frac},
                                             {"subnormal_frac", stats[i].subnormal_frac},
                                             {"max_abs_scaled", finite_or_null(stats[i].max_abs)}};
    metrics_->record({{"step", step}, {"scale", s.scale}, {"telemetry", t}});
  }
  seen_.scaler = s;
  seen_.norm_sq = now.norm_sq;
  if (log_step) log_interval(step, now);
}

void Trainer::log_interval(int64_t step, const StepScalarsDev& now) {
  // Mean training loss over the interval, over every rank's samples.
  float sums[2] = {now.loss_sum, float(interval_steps_ * int64_t(batch_) * int64_t(classification_ ? 1 : n_out_))};
  if (nranks_ > 1) world_.allreduce(view_of(sums, 2), ReduceOp::Sum);
  be_->zero(&dev_->loss_sum, sizeof(float) + sizeof(int32_t));
  const double loss = sums[1] > 0 ? double(sums[0]) / double(sums[1]) : 0.0;
  last_loss_ = loss;
  const double t = now_seconds();
  const double elapsed = t - interval_start_ - interval_pause_;
  interval_pause_ = 0;
  train_seconds_ += elapsed;
  const double step_s = interval_steps_ ? elapsed / double(interval_steps_) : 0.0;
  const double sps = elapsed > 0 ? double(interval_steps_) * double(sampler_->global_batch()) / elapsed : 0.0;
  const double grad_norm = std::sqrt(double(now.norm_sq));
  ProgressLine p;
  p.step = step;
  p.total = total_steps_;
  p.loss = loss;
  p.scale = now.scaler.scale;
  p.skipped = now.scaler.overflow_steps;
  p.grad_norm = grad_norm;
  p.lr = schedule_.at(step);
  p.step_ms = step_s * 1e3;
  p.samples_per_s = sps;
  p.eta_s = double(total_steps_ - step) * (train_seconds_ / double(std::max<int64_t>(1, step)));
  progress_->update(p);
  metrics_->record({{"step", step},
                    {"epoch", double(step) / double(sampler_->steps_per_epoch())},
                    {"loss", finite_or_null(loss)},
                    {"scale", now.scaler.scale},
                    {"skipped", now.scaler.overflow_steps},
                    {"growth_tracker", now.scaler.growth_tracker},
                    {"grad_norm", finite_or_null(grad_norm)},
                    {"lr", p.lr},
                    {"step_ms", p.step_ms},
                    {"samples_per_second", sps}});
  interval_steps_ = 0;
  check_loss(step, loss);
  check_finite_weights(step);
  interval_start_ = now_seconds();
}

EvalResult Trainer::evaluate() {
  EvalResult r;
  const Dataset& ev = data_.eval;
  if (ev.n == 0) return r;
  size_t begin, end;
  eval_shard(ev.n, rank_, nranks_, begin, end);
  const size_t in = ev.n_features, eb = size_t(cfg_.data.eval_batch_size);
  // Evaluation accumulates into its own scalars: loss, hits; scale 1, no gradients.
  StepScalarsDev init;
  init.scaler.scale = 1.0f;
  Buffer scal = be_->alloc(sizeof(StepScalarsDev));
  be_->upload(scal.data(), &init, sizeof init);
  StepScalarsDev* es = scal.as<StepScalarsDev>();
  const void* params = compute_ == DType::F32 ? master_.data() : lp_.data();
  for (size_t b0 = begin; b0 < end; b0 += eb) {
    const size_t nb = std::min(eb, end - b0);
    be_->upload(x_stage_.data(), &ev.x[b0 * in], nb * in * sizeof(float));
    Tensor x = x_stage_.tensor(DType::F32, nb, in);
    if (compute_ != DType::F32) {
      be_->cast(x_stage_.data(), DType::F32, x_lp_.data(), compute_, nb * in);
      x = x_lp_.tensor(compute_, nb, in);
    }
    const Tensor logits = model_->forward(x, params, nb);
    const Tensor none{nullptr, compute_, nb, n_out_};
    if (classification_) {
      be_->upload(labels_.data(), &ev.labels[b0], nb * sizeof(int32_t));
      be_->softmax_xent(logits, labels_.as<int32_t>(), &es->scaler.scale, 1.0f, none, &es->loss_sum, &es->correct);
    } else {
      be_->upload(targets_.data(), &ev.y[b0 * n_out_], nb * n_out_ * sizeof(float));
      be_->mse(logits, targets_.tensor(DType::F32, nb, n_out_), &es->scaler.scale, 1.0f, none, &es->loss_sum);
    }
  }
  StepScalarsDev got;
  be_->download(&got, es, sizeof got);
  double sums[3] = {double(got.loss_sum), double(got.correct), double(end - begin)};
  float f[3] = {float(sums[0]), float(sums[1]), float(sums[2])};
  if (nranks_ > 1) world_.allreduce(view_of(f, 3), ReduceOp::Sum);
  r.samples = size_t(f[2]);
  const double denom = double(f[2]) * (classification_ ? 1.0 : double(n_out_));
  r.loss = denom > 0 ? double(f[0]) / denom : 0.0;
  r.accuracy = classification_ && f[2] > 0 ? double(f[1]) / double(f[2]) : 0.0;
  return r;
}

std::string Trainer::ranks_differing_from_0(uint64_t mine, uint64_t* rank0) {
  std::vector<uint64_t> all(static_cast<size_t>(nranks_));
  world_.allgather(&mine, all.data(), sizeof mine);
  std::string differ;
  for (int r = 1; r < nranks_; ++r)
    if (all[size_t(r)] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  *rank0 = all[0];
  return differ;
}

void Trainer::check_params_in_sync(int64_t step) {
  uint64_t rank0_hash = 0;
  const std::string differ = ranks_differing_from_0(params_hash(), &rank0_hash);
  if (!differ.empty())
    throw Error(ErrorKind::Comm,
                strcat("communication error: ranks diverged: after step ", step, " the master weights of rank(s) ", differ,
                       " differ from rank 0's (hash ", hex64(rank0_hash), "); the all-reduce or an update was not "
                       "identical on every rank"),
                true);
}

nlohmann::json Trainer::summary_json(double wall_seconds, int64_t steps_done) {
  StepScalarsDev now;
  be_->download(&now, dev_, sizeof now);
  if (reducer_) take_comm_stats();  // the download waited for the device: the last step is measured
  const double sps = train_seconds_ > 0 ? double(steps_done) * double(sampler_->global_batch()) / train_seconds_ : 0.0;
  nlohmann::json j = {
      {"version", AMP_VERSION},
      {"backend", be_->name()},
      {"precision", precision_name(compute_)},
      {"loss_scale_mode", cfg_.loss_scale_mode()},
      {"world_size", nranks_},
      {"global_batch", sampler_->global_batch()},
      {"steps", steps_done},
      {"skipped_steps", now.scaler.overflow_steps},
      {"optimizer_steps", now.scaler.optimizer_steps},
      {"final_scale", now.scaler.scale},
      {"growth_tracker", now.scaler.growth_tracker},
      {"final_loss", finite_or_null(last_loss_)},
      {"eval_loss", last_eval_loss_ >= 0 ? nlohmann::json(last_eval_loss_) : nlohmann::json(nullptr)},
      {"eval_accuracy", classification_ && last_eval_acc_ >= 0 ? nlohmann::json(last_eval_acc_) : nlohmann::json(nullptr)},
      {"samples_per_second", sps},
      {"train_seconds", train_seconds_},
      {"wall_seconds", wall_seconds},
      {"params", model_->layout().n_params()},
      {"params_hash", hex64(params_hash())},
      {"config_hash", hex64(config_hash(cfg_))},
  };
  if (nranks_ > 1 && comm_steps_ > 0) {
    const double per_step = comm_seconds_ / double(comm_steps_);
    const double exposed = exposed_seconds_ / double(comm_steps_);
    j["allreduce_bytes_per_step"] = comm_bytes_;
    j["comm_seconds_per_step"] = per_step;
    j["comm_exposed_seconds_per_step"] = exposed;
    j["comm_hidden_share"] = per_step > 0 ? std::max(0.0, 1.0 - exposed / per_step) : 0.0;
  }
  return j;
}

int Trainer::run() {
  const bool lead = rank_ == 0;
  const int64_t spe = int64_t(sampler_->steps_per_epoch());
  interval_start_ = now_seconds();
  std::string last_saved;
  for (int64_t step = start_step_; step <= total_steps_; ++step) {
    train_step(step);
    ++interval_steps_;
    if (step == 1) record_first_loss();
    for (const FaultSpec& f : cfg_.faults.corrupt_params) {
      if (f.step != step || f.rank != rank_) continue;  // desync drill: this rank's weights drift
      float w0;
      be_->download(&w0, master_.data(), sizeof w0);
      w0 += 1e-3f;
      be_->upload(master_.data(), &w0, sizeof w0);
    }
    if (observer_) {
      StepScalarsDev now;
      std::vector<int32_t> flags(OverflowFlags::count(nranks_));
      be_->download(&now, dev_, sizeof now);
      be_->download(flags.data(), flags_dev_, flags.size() * sizeof(int32_t));
      observer_(step, now, flags);
    }
    {
      Watchdog::Detail detail;
      detail.note = "waits for the device and its NCCL collectives";
      Watchdog::Wait wait(be_->host_accessible() ? nullptr : world_.watchdog(), "reading the step's results", detail);
      observe(step, false);
    }
    const bool epoch_end = step % spe == 0;
    const bool do_eval = cfg_.run.eval_interval > 0 ? step % cfg_.run.eval_interval == 0 || step == total_steps_
                                                     : epoch_end || step == total_steps_;
    const bool do_hash = nranks_ > 1 && ((cfg_.distributed.hash_interval > 0 && step % cfg_.distributed.hash_interval == 0) ||
                                         step == total_steps_);
    const bool do_ckpt = (cfg_.checkpoint.interval > 0 && step % cfg_.checkpoint.interval == 0) ||
                         (cfg_.checkpoint.final && step == total_steps_);
    if (do_eval || do_hash || do_ckpt) {
      const double t0 = now_seconds();  // kept out of the throughput numbers
      if (do_hash) check_params_in_sync(step);
      if (do_eval && data_.eval.n > 0) {
        const EvalResult r = evaluate();
        last_eval_loss_ = r.loss;
        last_eval_acc_ = r.accuracy;
        if (lead) {
          progress_->message(classification_
                                 ? strcat("eval step ", step, " | loss ", r.loss, " | accuracy ", r.accuracy * 100.0,
                                          "% | ", r.samples, " samples")
                                 : strcat("eval step ", step, " | mse ", r.loss, " | ", r.samples, " samples"));
          nlohmann::json j = {{"step", step}, {"eval_loss", r.loss}, {"eval_samples", r.samples}};
          if (classification_) j["eval_accuracy"] = r.accuracy;
          metrics_->record(j);
        }
      }
      if (do_ckpt) {
        last_saved = save(step);
        if (lead) progress_->message(strcat("checkpoint step ", step, " -> ", last_saved));
      }
      interval_pause_ += now_seconds() - t0;
    }
    const Stop stop = stop_requested(step);
    if (stop == Stop::OutputFailed) {
      // Rank 0 could not write its run output: every rank stops after this step, with a
      // checkpoint if the checkpoint folder still takes one (it may lie on another disk).
      if (lead) std::fprintf(stderr, "%s\n", metrics_->failure().c_str());
      if (!do_ckpt) {
        try {
          last_saved = save(step);
        } catch (const Error& e) {
          if (!e.agreed()) throw;
          last_saved.clear();
        }
      }
      throw Error(ErrorKind::Output,
                  strcat("output error: stopped after step ", step, " because the run output in ", cfg_.resolved_out_dir(),
                         " could not be written",
                         last_saved.empty() ? std::string("") : "; checkpoint " + last_saved + " (resume with checkpoint.resume=auto)"),
                  true);
    }
    if (stop == Stop::Signal && step < total_steps_) {
      // Every rank finished this step; write its checkpoint (unless just written) and stop cleanly.
      if (!do_ckpt) last_saved = save(step);
      progress_->finish();
      nlohmann::json summary = summary_json(now_seconds() - run_start_, step);
      summary["stopped_early"] = true;
      summary["stop_signal"] = signal_name(stop_signal() ? stop_signal() : SIGTERM);
      summary["checkpoint"] = last_saved;
      run_agreed(world_, [&] { metrics_->write_summary(summary); });
      if (lead)
        progress_->message(strcat("stop requested (", summary["stop_signal"].get<std::string>(), "): stopped after step ", step,
                                  "; checkpoint ", last_saved, "; run again with checkpoint.resume=auto to continue"));
      return 0;
    }
  }
  progress_->finish();
  const nlohmann::json summary = summary_json(now_seconds() - run_start_, total_steps_);
  run_agreed(world_, [&] { metrics_->write_summary(summary); });
  if (lead) {
    std::string line = strcat("done: ", total_steps_, " steps, ", summary["skipped_steps"].get<int64_t>(),
                              " skipped, final scale ", summary["final_scale"].get<double>());
    if (last_eval_loss_ >= 0)
      line += classification_ ? strcat(", eval accuracy ", last_eval_acc_ * 100.0, "%") : strcat(", eval mse ", last_eval_loss_);
    line += strcat(", ", format_count(summary["samples_per_second"].get<double>()), " samples/s, params_hash ",
                   summary["params_hash"].get<std::string>());
    progress_->message(line);
  }
  return 0;
}

}  // namespace amp
