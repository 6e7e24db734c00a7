// Trainer set-up (trainer.h): the phases before the first step, agreed across ranks so that no
// rank is left waiting for one that failed; the loop and its reports are in trainer.cpp.

#include <algorithm>
#include <filesystem>

#include "comm/agree.h"
#include "comm/comm_factory.h"
#include "comm/watchdog.h"
#include "core/error.h"
#include "core/hash.h"
#include "model/make_model.h"
#include "train/init_weights.h"
#include "train/rank_threads.h"
#include "train/run_identity.h"
#include "train/signals.h"
#include "train/state_stream.h"
#include "train/trainer.h"

namespace amp {

Trainer::Trainer(const Config& cfg, Communicator& world)
    : cfg_(cfg), world_(world), rank_(world.rank()), nranks_(world.size()), drills_(cfg, world.rank()),
      reporter_(cfg, world.rank() == 0) {
  setup();
}

Trainer::~Trainer() = default;

// Set-up in phases, so that no rank is ever left waiting for one that failed: local work first
// (no collective inside), agreed on at its end; then the collective parts, whose errors are either
// the same on every rank (agreed) or end the job at once (the NCCL bootstrap).
void Trainer::setup() {
  run_start_ = now_seconds();
  run_agreed(world_, [&] { setup_local(); });
  guards_->check_ranks_agree(data_digest_, data_.train.source);
  {
    drills_.fail_setup("comm");  // a rank failing here leaves the others inside the bootstrap: abort
    std::unique_ptr<Communicator> device_comm =
        make_grad_communicator(cfg_.distributed.comm, world_, dynamic_cast<DeviceStream*>(be_.get()));
    step_->connect(world_, std::move(device_comm), overlap_buckets());
  }

  // A checkpoint to continue holds the weights (and says which ones the run started from):
  // model.init_from is then not read, and may be gone by the time a fine-tune resumes.
  const bool resuming = cfg_.checkpoint.resume != "none" && checkpoints_->locate();
  if (resuming && rank_ == 0 && !cfg_.model.init_from.empty())
    reporter_.message(strcat("model.init_from (", cfg_.model.init_from, ") is not read: the run continues from a checkpoint"));
  if (!resuming) {
    // Parameters: rank 0's initialization (or the weights of model.init_from, read by rank 0) is
    // everyone's, made or read and sent a piece at a time (no rank holds the whole model on the host).
    const ParamLayout& L = model_->layout();
    std::unique_ptr<WeightPieces> init;
    run_agreed(world_, [&] {
      if (rank_ != 0) return;
      init = cfg_.model.init_from.empty()
                 ? std::make_unique<GeneratedWeights>(L, model_->init_recipe(uint64_t(cfg_.run.seed)))
                 : open_initial_weights(cfg_, L, size_t(data_.train.vocab));
    });
    Hasher hasher;  // of model.init_from's weights, as params_hash hashes masters
    broadcast_pieces(world_, init.get(), L.total, [&](size_t begin, const float* v, size_t count) {
      step_->load(TrainStep::Slot::Masters, begin, v, count);
      if (!cfg_.model.init_from.empty()) hasher.update(v, count * sizeof(float));
    });
    init.reset();
    if (!cfg_.model.init_from.empty()) {
      // The weights' identity, not only their path (a file may be replaced or moved later): the
      // hash is params_hash's, so a checkpoint's own params_hash names the same weights.
      record_.init_params_hash = hex64(hasher.digest());
      if (rank_ == 0)
        reporter_.message(strcat("initial weights: ", cfg_.model.init_from, " (model.init_from, params_hash ",
                                 record_.init_params_hash, "; a fresh optimizer and loss scale)"));
    }
  }

  run_agreed(world_, [&] { setup_output(); });
  if (cfg_.checkpoint.resume != "none") {
    start_step_ = checkpoints_->resume(record_, &resumed_from_) + 1;
    // A run.epochs run ends where its epochs are consumed, counted from the resumed data position
    // (another global batch makes another number of steps).
    total_steps_ = checkpoints_->end_step();
    schedule_.total_steps = total_steps_;
  }
  // The run's identity (fresh, or the resumed checkpoint's), and its folders holding it alone.
  run_agreed(world_, [&] { establish_identity(); });
  seen_ = step_->amp().read();
  // A resumed run keeps the records up to its checkpoint and appends after them.
  run_agreed(world_, [&] { reporter_.open_metrics(start_step_ - 1, replaced_line_); });
  // Each process of the run starts its part of metrics.jsonl with who it is.
  reporter_.metrics().record({{"step", start_step_ - 1},
                              {"event", start_step_ > 1 ? "resume" : "start"},
                              {"run_id", run_id_},
                              {"world_size", nranks_},
                              {"global_batch", sampler_->global_batch()}});
  if (cfg_.checkpoint.on_signal) {
    announce_stop_signals(rank_ == 0);
    install_stop_signals();
  } else {
    disarm_stop_signals();
  }
  if (rank_ == 0) {
    if (!resumed_from_.empty())
      reporter_.message(strcat("resumed from ", resumed_from_, " at step ", start_step_ - 1, " (scale ",
                               seen_.scaler.scale, ", ", seen_.scaler.overflow_steps, " skipped so far)"));
    reporter_.message(strcat("amp_ddp ", AMP_VERSION, " | ", nranks_, " rank(s) x ", be_->name(), " | ",
                             compute_name(cfg_), " compute, loss scale ", scale_mode_name(cfg_.precision.scaler.mode),
                             " | ", model_->layout().n_params(), " parameters | global batch ", sampler_->global_batch(),
                             accum_ > 1 ? strcat(" (", batch_, " x ", accum_, " micro-batches x ", nranks_, " ranks)") : "",
                             " | ", total_steps_, " steps (", sampler_->steps_per_epoch(), " per epoch) | out ",
                             cfg_.resolved_out_dir()));
    const StateBytes& b = step_->state_bytes();
    const size_t rows = model_->max_rows();
    reporter_.message(strcat("memory per rank: training state ", format_bytes(b.total()), " (masters ", format_bytes(b.masters),
                             ", optimizer moments ", format_bytes(b.moments), ", working copy ", format_bytes(b.working),
                             ", gradients ", format_bytes(b.gradients), "), activations ", format_bytes(model_->buffer_bytes()),
                             " (", rows, model_->language_model() ? " windows" : " samples", " per forward pass): ",
                             format_bytes(double(b.total()) + double(model_->buffer_bytes())),
                             !step_->sharded() ? (cfg_.distributed.zero > 0 ? strcat("; distributed.zero ", cfg_.distributed.zero,
                                                                                     " has nothing to shard on one rank")
                                                                              : std::string(""))
                             : cfg_.distributed.zero == 2 ? strcat("; optimizer state and reduced gradients sharded over ", nranks_,
                                                                   " ranks, gradient buckets returned once reduced (distributed.zero 2)")
                                                          : strcat("; optimizer state sharded over ", nranks_, " ranks (distributed.zero 1)")));
    if (cfg_.run.cuda_graph && accum_ > 1 && !be_->memory().host_accessible())
      reporter_.message(strcat("note: steps of ", accum_, " micro-batches (data.grad_accum_steps) stage each one from "
                               "the host mid-step, so they run without a CUDA graph"));
    else if (cfg_.run.cuda_graph && step_->releases() && !be_->memory().host_accessible())
      reporter_.message("note: distributed.zero 2 returns and maps gradient pages from the host during the step, "
                        "so steps run without a CUDA graph");
  }
}

void Trainer::setup_local() {
  drills_.check_ranks(nranks_);
  drills_.fail_setup("backend");
  be_ = make_backend(cfg_.run.device, world_.local_rank(), pick_threads(cfg_.run.threads, world_.local_size()));
  compute_ = cfg_.precision.compute;
  if (cfg_.distributed.zero == 2 && be_->memory().release_granularity() == 0)
    throw Error(ErrorKind::Config, strcat("config error: ", cfg_.origin.at("distributed.zero"), ": distributed.zero: 2 returns "
                                          "each gradient bucket's memory once it is reduced, which the ", be_->name(),
                                          " backend cannot do (its device or driver has no CUDA virtual memory "
                                          "management); use distributed.zero 1"));

  drills_.fail_setup("data");
  try {
    data_ = load_datasets(cfg_);
  } catch (const std::bad_alloc&) {
    throw Error(ErrorKind::Data, strcat("data error: out of host memory loading the data (data.format ", cfg_.data.format,
                                        "); use fewer or smaller data files, or a machine with more memory"));
  }
  data_digest_ = dataset_digest(data_.train, dataset_digest(data_.eval, 0));
  batch_ = size_t(cfg_.data.batch_size);
  accum_ = size_t(cfg_.data.grad_accum_steps);
  // The sampler hands each rank all its micro-batches of a step at once (batch x accum samples).
  sampler_ = std::make_unique<ShardedSampler>(data_.train.n, batch_ * accum_, rank_, nranks_, uint64_t(cfg_.run.seed),
                                              cfg_.data.shuffle);
  const int64_t spe = int64_t(sampler_->steps_per_epoch());
  total_steps_ = cfg_.run.steps;
  if (total_steps_ == 0) {
    if (cfg_.run.epochs > kMaxSteps / spe)
      throw Error(ErrorKind::Config, strcat("config error: ", cfg_.origin.at("run.epochs"), ": run.epochs: ",
                                            cfg_.run.epochs, " epochs of ", spe, " steps are more than ", kMaxSteps,
                                            " steps; set fewer epochs (or run.steps)"));
    total_steps_ = cfg_.run.epochs * spe;
  }

  // Evaluation batches never exceed this rank's share of the evaluation set.
  size_t eval_begin = 0, eval_end = 0;
  eval_shard(data_.eval.n, rank_, nranks_, eval_begin, eval_end);
  const size_t max_rows = std::max(batch_, std::min(size_t(cfg_.data.eval_batch_size), eval_end - eval_begin));
  model_ = make_model(cfg_, data_.train, be_->memory(), be_->ops(), compute_, max_rows, nranks_,
                      be_->memory().memory_available(world_.local_size()));
  const ParamLayout& L = model_->layout();
  drills_.bind(L, nranks_, model_->fp8_tensors());  // tensor names are checked here, ranks at start-up
  guards_ = std::make_unique<Guards>(cfg_, world_, *be_);
  guards_->bind(L);

  step_ = std::make_unique<TrainStep>(cfg_, *be_, *model_, compute_, batch_, accum_, rank_, nranks_);
  // Faults are planted from the host in the middle of a step: such runs are not captured.
  step_->allow_capture(cfg_.run.cuda_graph && cfg_.faults.inject_nonfinite.empty());
  if (drills_.plants_gradients())
    step_->set_gradient_hook([this](int64_t step, int tensor) {
      drills_.plant_gradient(step, tensor, be_->memory(), const_cast<void*>(step_->gradients()), compute_);
    });
  if (drills_.plants_fp8_gradients())
    step_->set_fp8_gradient_hook([this](int64_t step, int tensor, void* data, DType dtype) {
      drills_.plant_fp8_gradient(step, tensor, be_->memory(), data, dtype);
    });

  schedule_.kind = cfg_.optimizer.schedule;
  schedule_.lr = cfg_.optimizer.lr;
  schedule_.min_lr = cfg_.optimizer.min_lr;
  schedule_.warmup_steps = cfg_.optimizer.warmup_steps;
  schedule_.decay_steps = cfg_.optimizer.decay_steps;
  schedule_.total_steps = total_steps_;
  checkpoints_ = std::make_unique<CheckpointIO>(cfg_, world_, *step_, L, compute_, *sampler_, reporter_, drills_);
  checkpoints_->set_data_digest(data_digest_);
  if (model_->language_model() && cfg_.sample.tokens > 0) sample_prompt();  // refused now, not at the first sample
}

// Overlap needs a core for the communication thread: on a CPU rank whose cores all compute, the
// all-reduce would only steal time from backward, so it runs after it instead.
bool Trainer::overlap_buckets() const {
  const Toggle ov = cfg_.distributed.overlap;
  const int threads = pick_threads(cfg_.run.threads, world_.local_size());
  return ov == Toggle::On ||
         (ov == Toggle::Auto && (!be_->memory().host_accessible() || cpus_per_rank(world_.local_size()) > threads));
}

// Rank 0 owns the run folders: a lock so that no second run writes into them, and a check that
// they are writable with room for a checkpoint, before any training time is spent.
void Trainer::setup_output() {
  drills_.fail_setup("output");
  if (rank_ != 0) return;
  const std::string out = cfg_.resolved_out_dir(), ck = cfg_.resolved_checkpoint_dir();
  out_lock_ = std::make_unique<RunDirLock>(out, "run.out_dir");
  check_writable(out, "run.out_dir", 1 << 20);
  // The checkpoint folder is locked too, also inside out_dir: another run pointing its
  // checkpoint.dir at it (this run's out_dir/checkpoints, say) is refused.
  std::error_code ec;
  if (std::filesystem::weakly_canonical(ck, ec) != std::filesystem::weakly_canonical(out, ec))
    ckpt_lock_ = std::make_unique<RunDirLock>(ck, "checkpoint.dir");
  // What a process killed mid-write left (a checkpoint cut short by a second Ctrl-C, say).
  for (const std::string& dir : {out, ck})
    for (const std::string& name : remove_stale_temporaries(dir))
      reporter_.message(strcat("removed ", dir, "/", name, ", the unfinished file of a write that was interrupted"));
  const bool writes_ckpt = cfg_.checkpoint.final || cfg_.checkpoint.interval > 0 || cfg_.checkpoint.on_signal;
  if (!writes_ckpt) return;
  // A checkpoint: masters and optimizer state (FP32), the header; the temporary file is written
  // beside the previous ones before the oldest is removed.
  const size_t states = (step_->has_state(1) ? 1 : 0) + (step_->has_state(2) ? 1 : 0);
  const uint64_t ckpt_bytes = uint64_t(model_->layout().total) * 4 * (1 + states) + (1 << 20);
  check_writable(ck, "checkpoint.dir", ckpt_bytes);
}

// Rank 0: the run id is the resumed checkpoint's (a checkpoint written before runs had ids: the
// run folder's, else a new one) or, fresh, a new one. Whatever the folders hold of other runs is
// moved aside before this run writes anything; a roll-back's newer checkpoints then go to
// abandoned/.
void Trainer::establish_identity() {
  if (rank_ != 0) return;
  const std::string out = cfg_.resolved_out_dir(), ck = cfg_.resolved_checkpoint_dir();
  std::string id = resumed_from_.empty() ? std::string() : checkpoint_run_id(resumed_from_);
  const bool legacy = !resumed_from_.empty() && id.empty();
  if (id.empty()) id = legacy && !recorded_run_id(out).empty() ? recorded_run_id(out) : new_run_id();
  for (const std::string& line : keep_runs_apart(out, ck, id, legacy, resumed_from_.empty())) reporter_.message(line);
  write_run_json(out, id);
  out_lock_->started();
  if (ckpt_lock_) ckpt_lock_->started();
  run_id_ = id;
  checkpoints_->set_run_id(id);
  if (start_step_ > 1) replaced_line_ = checkpoints_->set_aside_newer(start_step_ - 1, resumed_from_);
}

}  // namespace amp
