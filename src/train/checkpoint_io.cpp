#include "train/checkpoint_io.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "amp/scaler_resume.h"
#include "comm/agree.h"
#include "core/error.h"
#include "core/hash.h"
#include "train/checkpoint_fields.h"
#include "train/run_identity.h"

namespace amp {

using checkpoint_fields::config_then;
using checkpoint_fields::header_field;

namespace {

nlohmann::json layout_json(const ParamLayout& L) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& t : L.tensors) j.push_back({{"name", t.name}, {"rows", t.rows}, {"cols", t.cols}});
  return j;
}

template <typename T>
SectionView view_of_values(const T* p, size_t n) {
  return SectionView{p, n * sizeof(T), {}};
}

// Model keys that decide the function the weights compute beyond the parameter shapes (which the
// layout check covers); model.init and model.init_std only shape a fresh start, and
// model.vocab_pad only the logits' stride and the LM head's GEMM width (the same function: the
// same bits on the CPU, within GEMM rounding on a GPU).
constexpr const char* kModelFunctionKeys[] = {"model.type", "model.activation", "model.n_head", "model.n_layer",
                                              "model.n_embd", "model.hidden", "model.seq_len", "model.vocab_size",
                                              "model.loss_weight"};

}  // namespace

CheckpointIO::CheckpointIO(const Config& cfg, Communicator& world, TrainStep& step, const ParamLayout& layout,
                           DType compute, ShardedSampler& sampler, Reporter& reporter, const Drills& drills)
    : cfg_(cfg), world_(world), step_(step), layout_(layout), compute_(compute), sampler_(sampler),
      reporter_(reporter), drills_(drills) {}

int64_t CheckpointIO::end_step() const {
  return cfg_.run.steps > 0 ? cfg_.run.steps : sampler_.step_at_epoch(cfg_.run.epochs);
}

uint64_t CheckpointIO::samples_consumed(int64_t step) const {
  return samples_before_ + uint64_t(step - resumed_step_) * uint64_t(sampler_.global_batch());
}

std::string CheckpointIO::save(int64_t step, const RunRecord& record) {
  using Slot = TrainStep::Slot;
  // The masters' hash first: the header, written before them, holds it (a pass over the masters,
  // collective when they are sharded).
  const uint64_t params_hash = step_.masters_hash();
  const StepSums sums = step_.read_sums();
  const ScalerState scaler = step_.amp().read().scaler;
  // Each rank's half-finished interval sums differ: every rank gets its own back on resume, so the
  // logged losses after a resume are the uninterrupted run's, bit for bit.
  const RankIntervalSums mine{sums.loss_sum, sums.correct};
  std::vector<RankIntervalSums> all(static_cast<size_t>(world_.size()));
  world_.allgather(&mine, all.data(), sizeof mine);
  // Then rank 0 writes the file while the masters and moments reach it a piece at a time (sharded:
  // the other ranks send their shards bucket by bucket); no rank holds a slot whole. Every rank
  // reads the slots in the file's order, each to its end whatever happens to rank 0's file (the
  // reads are collectives): a failed write is rank 0's error, agreed after the last slot.
  std::vector<Slot> slots = {Slot::Masters};
  if (step_.has_state(1)) slots.push_back(Slot::State1);
  if (step_.has_state(2)) slots.push_back(Slot::State2);
  size_t sent = 0;  // slots read so far
  const SlotSender send = [&](Slot slot, const ByteSink* sink) {
    // A section asked out of the slots' order is a bug; thrown before the read, so the slot is
    // still read with the rest (below).
    AMP_CHECK(slot == slots[sent], "checkpoint save: slot ", int(slot), " asked for, slot ", int(slots[sent]), " is next");
    HeldError lost;  // the sink's first failure; the slot is still read to its end
    step_.read(slots[sent], [&](size_t, const float* v, size_t count) {
      if (sink) lost.attempt([&] { (*sink)(v, count * sizeof(float)); });
    });
    ++sent;
    lost.rethrow();
  };
  std::string path;
  HeldError failed;
  if (world_.rank() == 0) failed.attempt([&] { path = write(step, scaler, all, record, params_hash, send); });
  while (sent < slots.size()) send(slots[sent], nullptr);  // those rank 0's write did not reach (all elsewhere)
  run_agreed(world_, [&] { failed.rethrow(); });
  return path;
}

std::string CheckpointIO::write(int64_t step, const ScalerState& scaler, const std::vector<RankIntervalSums>& sums,
                                const RunRecord& record, uint64_t params_hash, const SlotSender& send) {
  // The masters and moments are written as they arrive (send), in the file's order of sections
  // (by name: master, state1, state2, as the slots are sent); the rest from where it is.
  const size_t slot_bytes = layout_.total * sizeof(float);
  using Slot = TrainStep::Slot;
  const auto streamed = [&](Slot slot) {
    return SectionView{nullptr, slot_bytes, [&send, slot](const ByteSink& sink) { send(slot, &sink); }};
  };
  SectionViews sections;
  sections["master"] = streamed(Slot::Masters);
  if (step_.has_state(1)) sections["state1"] = streamed(Slot::State1);
  if (step_.has_state(2)) sections["state2"] = streamed(Slot::State2);
  const DataPosition pos = sampler_.position(step);
  sections["scaler"] = view_of_values(&scaler, 1);
  sections["rank_sums"] = view_of_values(sums.data(), sums.size());
  nlohmann::json fp8 = nullptr;
  Fp8State::Host h;
  if (const Fp8State* f = step_.amp().fp8()) {  // the FP8 scales and amax histories (every rank's alike)
    h = f->read();
    sections["fp8_scales"] = view_of_values(h.scales.data(), h.scales.size());
    sections["fp8_history"] = view_of_values(h.history.data(), h.history.size());
    sections["fp8_meta"] = view_of_values(&h.meta, 1);
    std::vector<std::string> names;
    for (const Fp8Tensor& t : f->tensors()) names.push_back(t.name);
    fp8 = {{"tensors", names}, {"amax_history", f->params().history}};
  }
  nlohmann::json header = {{"program", "amp_ddp"},
                            {"version", AMP_VERSION},
                            {"run_id", run_id_},
                            {"step", step},
                            {"epoch", sampler_.epochs_done(step)},
                            {"world_size", world_.size()},
                            {"zero", cfg_.distributed.zero},
                            {"global_batch", sampler_.global_batch()},
                            {"data_epoch", pos.epoch},
                            {"data_offset", pos.offset},
                            {"samples_consumed", samples_consumed(step)},
                            {"data_digest", hex64(data_digest_)},
                            {"precision", compute_name(cfg_)},
                            {"optimizer", optimizer_name(cfg_.optimizer.params.kind)},
                            {"loss_scale_mode", scale_mode_name(cfg_.precision.scaler.mode)},
                            {"config_hash", hex64(config_hash(cfg_))},
                            {"config", config_values(cfg_)},
                            {"params_hash", hex64(params_hash)},
                            {"layout", layout_json(layout_)},
                            {"scaler", {{"scale", scaler.scale},
                                        {"growth_tracker", scaler.growth_tracker},
                                        {"hysteresis_left", scaler.hysteresis_left},
                                        {"overflow_steps", scaler.overflow_steps},
                                        {"optimizer_steps", scaler.optimizer_steps}}},
                            {"interval_steps", record.interval_steps},
                            {"first_loss", record.first_loss},
                            {"last_loss", finite_or_null(record.last_loss)},
                            {"last_eval_loss", record.last_eval_loss},
                            {"last_eval_accuracy", record.last_eval_accuracy},
                            {"train_seconds", record.train_seconds},
                            {"interval_seconds", finite_or_null(record.interval_seconds)},
                            {"wall_seconds", record.wall_seconds},
                            {"sizeof_scaler", sizeof(ScalerState)}};
  if (!fp8.is_null()) header["fp8"] = fp8;
  if (!record.init_params_hash.empty()) header["init_params_hash"] = record.init_params_hash;
  return save_checkpoint(cfg_.resolved_checkpoint_dir(), header, sections, int(cfg_.checkpoint.keep));
}

// Rank 0: does this checkpoint belong to this run? Refused when it cannot continue it.
void CheckpointIO::check_header(const Checkpoint& ck, const std::string& path) const {
  auto mismatch = [&](const std::string& what, const nlohmann::json& theirs, const nlohmann::json& ours) {
    const auto brief = [](const nlohmann::json& j) {  // a crafted header can be long
      const std::string t = j.dump();
      return t.size() > 240 ? t.substr(0, 240) + "..." : t;
    };
    throw Error(ErrorKind::Checkpoint, strcat("checkpoint error: ", path, ": written by a run with ", what, " ",
                                              brief(theirs), ", this run has ", brief(ours)));
  };
  const int64_t world = header_field<int64_t>(ck, "world_size", -1);
  if (world < 1) mismatch("world size", world, world_.size());
  const std::string run_id = header_field<std::string>(ck, "run_id", "");
  if (ck.header.contains("run_id") && !valid_run_id(run_id))
    throw Error(ErrorKind::Checkpoint, strcat("checkpoint error: ", path, ": header field \"run_id\" is not a run id "
                                              "(16 hex digits): the file is corrupt or was not written by this program"));
  const int64_t zero = header_field<int64_t>(ck, "zero", 0);
  if (zero < 0 || zero > 2)
    throw Error(ErrorKind::Checkpoint, strcat("checkpoint error: ", path, ": header field \"zero\" is ", zero, ", not 0, 1 or 2"));
  const nlohmann::json layout = ck.header.contains("layout") ? ck.header["layout"] : nlohmann::json();
  if (layout != layout_json(layout_)) mismatch("another model: parameter tensors", layout, layout_json(layout_));
  // Another compute precision is allowed: the masters and moments are FP32 (checkpoint_apply.cpp).
  if (const std::string prec = header_field<std::string>(ck, "precision", "");
      prec != "fp32" && prec != "fp16" && prec != "bf16" && prec != "fp8")
    throw Error(ErrorKind::Checkpoint, strcat("checkpoint error: ", path, ": header field \"precision\" is \"", prec,
                                              "\", not fp32, fp16, bf16 or fp8"));
  const std::string opt = header_field<std::string>(ck, "optimizer", "");
  if (opt != optimizer_name(cfg_.optimizer.params.kind)) mismatch("optimizer", opt, optimizer_name(cfg_.optimizer.params.kind));
  if (const int64_t bytes = header_field<int64_t>(ck, "sizeof_scaler", 0); bytes != int64_t(sizeof(ScalerState)))
    throw Error(ErrorKind::Checkpoint,
                strcat("checkpoint error: ", path, ": its loss-scaler state is laid out in ", bytes, " bytes (program ",
                       header_field<std::string>(ck, "version", "?"), "), this program's in ", sizeof(ScalerState),
                       " bytes (", AMP_VERSION, "): another build wrote it"));
  // The same shapes can compute another function (heads, activation): another model too.
  const std::map<std::string, std::string> values = config_values(cfg_);
  for (const char* key : kModelFunctionKeys) {
    const std::string then = config_then(ck, key), now = values.at(key);
    if (!then.empty() && then != now) mismatch(strcat("another model: ", key), then, now);
  }
  // Beyond this run's end: steps, or (run.epochs) the data position the checkpoint recorded.
  if (cfg_.run.steps > 0 && ck.step() > cfg_.run.steps)
    throw Error(ErrorKind::Checkpoint,
                strcat("checkpoint error: ", path, ": it is at step ", ck.step(), ", beyond this run's ", cfg_.run.steps,
                       " steps; raise run.steps to train on from it, or start the new run in another run.out_dir / "
                       "checkpoint.dir"));
  if (cfg_.run.steps == 0) {
    const int64_t epoch = header_field<int64_t>(ck, "data_epoch", 0);
    const int64_t offset = header_field<int64_t>(ck, "data_offset", 0);
    if (epoch > cfg_.run.epochs || (epoch == cfg_.run.epochs && offset > 0))
      throw Error(ErrorKind::Checkpoint,
                  strcat("checkpoint error: ", path, ": it is at epoch ", epoch, " (sample ", offset, "), beyond this run's ",
                         cfg_.run.epochs, " epochs; raise run.epochs to train on from it, or start the new run in "
                         "another run.out_dir / checkpoint.dir"));
  }
  // What changed since the checkpoint, by key (checkpoint.resume itself always differs on a resume);
  // older checkpoints carry only the hash.
  const auto cfg_it = ck.header.find("config");
  if (cfg_it != ck.header.end() && cfg_it->is_object()) {
    std::string changed;
    int n = 0;
    for (const auto& [key, now] : values) {
      if (key == "checkpoint.resume") continue;
      const auto then = cfg_it->find(key);
      const std::string before = then != cfg_it->end() && then->is_string() ? then->get<std::string>() : "(absent)";
      if (before == now) continue;
      if (n++ < 8) changed += strcat(changed.empty() ? "" : ", ", key, " ", before, " -> ", now);
    }
    if (n > 8) changed += strcat(", and ", n - 8, " more");
    if (n > 0) reporter_.message(strcat("note: ", path, " was written with another configuration (", changed, "); continuing with this one"));
  } else if (header_field<std::string>(ck, "config_hash", "") != hex64(config_hash(cfg_))) {
    reporter_.message("note: " + path + " was written with a different configuration; continuing with this one");
  }
  // The data's contents (older checkpoints: not recorded). The position continues as recorded, now
  // in other data: worth a line even where the config names the same files.
  if (const std::string then = header_field<std::string>(ck, "data_digest", ""); !then.empty() && then != hex64(data_digest_))
    reporter_.message(strcat("note: ", path, " was written on other data (digest ", then, ", this run's ", hex64(data_digest_),
                             ": the data files changed, or the config names others); the data continues at the "
                             "checkpoint's position in this run's data"));
}

// A checkpoint this run folder set aside (checkpoints/abandoned/: a line a roll-back replaced;
// previous/: another run) cannot be continued here: its line's records and checkpoints would
// interleave with the current line's. It can be continued in a run folder of its own.
void CheckpointIO::refuse_set_aside(const std::string& path) const {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path file = fs::weakly_canonical(path, ec);
  for (const fs::path& dir : {fs::path(cfg_.resolved_checkpoint_dir()) / "abandoned",
                              fs::path(cfg_.resolved_out_dir()) / "previous"}) {
    const std::string rel = file.lexically_relative(fs::weakly_canonical(dir, ec)).string();
    if (rel.empty() || rel == "." || rel.rfind("..", 0) == 0) continue;
    throw Error(ErrorKind::Config,
                strcat("config error: ", cfg_.origin.at("checkpoint.resume"), ": checkpoint.resume: ", path,
                       " was set aside by this run folder (", dir.string(), "/), so continuing it here would mix two "
                       "lines of training in one metrics.jsonl and checkpoint folder; continue it in a run folder of "
                       "its own (another run.out_dir), or copy that line's folder back as a whole"));
  }
}

bool CheckpointIO::locate() {
  // Rank 0 finds, reads and checks the checkpoint, its weights included (agreed: a failure there
  // ends every rank); every rank then receives the rest of it (header and small sections; none:
  // nothing to resume). The weights stay in the file (rank 0 reads them a piece at a time, to
  // check them now and to send them when the run resumes: apply).
  std::string& rest = located_rest_;
  std::string& path = located_path_;
  run_agreed(world_, [&] {
    if (world_.rank() != 0) return;
    const std::string dir = cfg_.resolved_checkpoint_dir();
    const SectionStream stream = weight_stream();  // the weights are scanned as the file is verified
    if (cfg_.checkpoint.resume == "auto") {
      // The run this folder holds (run.json) is the one continued; another run's checkpoints
      // (copied in, or left by an older program) are skipped, and moved aside once this run starts.
      std::vector<std::string> skipped;
      path = find_latest_intact(dir, &skipped, recorded_run_id(cfg_.resolved_out_dir()), &located_, &stream);
      for (const auto& s : skipped) reporter_.message("skipping " + s);
      if (path.empty()) {
        reporter_.message("checkpoint.resume is auto but " + dir + " holds no intact checkpoint: starting from step 1");
        return;
      }
    } else {
      path = cfg_.checkpoint.resume;
      refuse_set_aside(path);
      located_ = load_checkpoint(path, stream);
    }
    check_header(located_, path);
    validate_weights(located_, path);
    Checkpoint small;  // everything but the weights, which stay in the file (a few KB)
    small.header = located_.header;
    small.sections = located_.sections;
    rest = serialize_checkpoint(small);
  });
  int64_t size = int64_t(rest.size());
  world_.broadcast(BufView{&size, sizeof size, DType::U8}, 0);
  if (size == 0) return false;
  rest.resize(size_t(size));
  world_.broadcast(BufView{rest.data(), rest.size(), DType::U8}, 0);
  return true;
}

int64_t CheckpointIO::resume(RunRecord& record, std::string* from) {
  if (located_rest_.empty()) return 0;
  const std::string path = std::move(located_path_);
  const std::string rest = std::move(located_rest_);
  apply(rest, path, record);
  const int64_t step = resumed_step_;
  if (world_.rank() == 0 && step == end_step())
    reporter_.message(strcat("the checkpoint is at step ", step, ", the last of this run (",
                             cfg_.run.steps > 0 ? "run.steps" : "run.epochs", "): nothing left to train"));
  *from = path;
  return step;
}

// After a roll-back to an older checkpoint, this run's newer ones belong to the line this one
// replaces: they go to abandoned/<time>-step<N>/ (kept, not deleted; each roll-back its own folder,
// so a second never overwrites the first's), so that resume=auto and checkpoint.keep see only
// the new line. Copies of its summary.json and config go there too. (Other runs' checkpoints
// were moved aside before: run_identity.h.)
std::string CheckpointIO::set_aside_newer(int64_t step, const std::string& resumed_from) {
  const std::string dir = cfg_.resolved_checkpoint_dir();
  std::error_code ec;
  const std::filesystem::path from = std::filesystem::weakly_canonical(resumed_from, ec);
  std::vector<std::string> newer;
  bool same_step = false;  // a checkpoint at the resumed step that is not the one resumed from
  for (const std::string& p : list_checkpoints(dir)) {
    const int64_t s = name_step(p);
    const bool other_at_step = s == step && std::filesystem::weakly_canonical(p, ec) != from;
    if (s > step || other_at_step) newer.push_back(p);
    same_step = same_step || other_at_step;
  }
  if (newer.empty()) return "";
  char stamp[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", std::gmtime(&t));
  std::filesystem::path folder = std::filesystem::path(dir) / "abandoned" / strcat(stamp, "-step", step);
  for (int k = 2; std::filesystem::exists(folder); ++k)
    folder = std::filesystem::path(dir) / "abandoned" / strcat(stamp, "-step", step, "-", k);
  std::vector<std::string> moved;
  for (const std::string& p : newer) {
    const std::filesystem::path to = folder / std::filesystem::path(p).filename();
    std::error_code ec;
    std::filesystem::create_directories(folder, ec);
    if (!ec) std::filesystem::rename(p, to, ec);
    if (ec)
      warn(strcat("could not move ", p, " (of the line replaced at step ", step, ") aside: ", ec.message(),
                  "; resume=auto would pick it"));
    else
      moved.push_back(std::filesystem::path(p).filename().string());
  }
  if (moved.empty()) return "";
  std::string list;
  for (const auto& m : moved) list += (list.empty() ? "" : ", ") + m;
  // The line's summary and config go with its checkpoints (this run writes its own); its records
  // after `step` follow when metrics.jsonl is cut (Reporter::open_metrics).
  std::string kept = strcat("its records after step ", step);
  for (const char* f : {"summary.json", "config.yaml"}) {
    const std::filesystem::path file = std::filesystem::path(cfg_.resolved_out_dir()) / f;
    if (!std::filesystem::is_regular_file(file, ec)) continue;
    std::filesystem::copy_file(file, folder / f, ec);
    if (ec) warn(strcat("could not keep ", file.string(), " of the line replaced at step ", step, ": ", ec.message()));
    else kept += strcat(f[0] == 's' ? ", " : " and ", f);
  }
  reporter_.message(strcat("moved ", moved.size(), " checkpoint(s) ", same_step ? "at or after" : "newer than", " step ", step,
                           " (from the line this run replaces) to ", folder.string(), "/: ", list, "; ", kept,
                           " kept in that folder"));
  return folder.string();
}

}  // namespace amp
