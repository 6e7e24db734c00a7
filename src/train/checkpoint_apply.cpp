// How a run continues from a verified checkpoint (CheckpointIO::apply), in three steps:
//   validate  every section and header field the resume reads, each against what this program can
//             have written (a checkpoint error names the field and the file): the weights by rank
//             0, which read the file (validate_weights), the rest by every rank
//   derive    what this run takes from it: the scaler adapted to this run's settings
//             (amp/scaler_resume.h), the half-finished log interval's sums gathered from another
//             world size and rescaled to another global batch, the data position
//   load      into the step (the weights streamed from rank 0 a piece at a time), the sampler and
//             the run record; nothing is loaded before every field has passed.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "amp/scaler_resume.h"
#include "comm/agree.h"
#include "core/error.h"
#include "core/format.h"
#include "core/hash.h"
#include "train/checkpoint_fields.h"
#include "train/checkpoint_io.h"
#include "train/checkpoint_model.h"
#include "train/state_stream.h"

namespace amp {

using checkpoint_fields::config_then;
using checkpoint_fields::header_field;

// What a checkpoint resumes, validated, then adapted to this run.
struct CheckpointIO::Resumed {
  int64_t step = 0;
  ScalerResume scaler;
  int64_t world_then = 0, batch_then = 0, zero_then = 0;
  std::string precision_then;  // the writer's compute precision
  bool fp8_loaded = false;     // this run's FP8 tensors and history length: the writer's state
  Fp8State::Host fp8;
  std::string fp8_note;        // why the FP8 scales start anew
  std::vector<RankIntervalSums> sums_then;  // every writing rank's
  RankIntervalSums sums;                    // this rank's share (derive)
  DataPosition pos;
  int64_t samples = 0;  // training samples consumed (all ranks) up to step
  RunRecord record;     // the fields a checkpoint carries
};

namespace {

std::vector<float> floats(const std::vector<char>& raw) {
  std::vector<float> v(raw.size() / sizeof(float));
  std::memcpy(v.data(), raw.data(), v.size() * sizeof(float));
  return v;
}

bool in_range(double v, double lo, double hi) { return std::isfinite(v) && v >= lo && v <= hi; }

// A checkpoint error naming the file.
struct Bad {
  const std::string& path;
  [[noreturn]] void operator()(const std::string& what) const {
    throw Error(ErrorKind::Checkpoint, strcat("checkpoint error: ", path, ": ", what));
  }
};

size_t section_bytes(const std::vector<char>& held) { return held.size(); }
uint64_t section_bytes(const FileSection& in_file) { return in_file.bytes; }
// A section held (sections) or left in the file (in_file), present with the bytes this run needs.
template <typename Map>
const typename Map::mapped_type& sized(const Map& sections, const Bad& bad, const char* name, size_t bytes) {
  const auto it = sections.find(name);
  if (it == sections.end()) bad(strcat("section \"", name, "\" is missing"));
  if (uint64_t(section_bytes(it->second)) != bytes)
    bad(strcat("section \"", name, "\" has ", section_bytes(it->second), " bytes, this run needs ", bytes));
  return it->second;
}

const std::vector<char>& section(const Checkpoint& ck, const Bad& bad, const char* name, size_t bytes) {
  return sized(ck.sections, bad, name, bytes);
}

// The run record: a loss is finite and >= 0 (or -1: none yet), an accuracy in [0, 1] (or -1),
// times finite and >= 0, the half-finished interval within the run.
RunRecord validated_record(const Checkpoint& ck, const Bad& bad, int64_t step) {
  RunRecord rec;
  rec.interval_steps = header_field<int64_t>(ck, "interval_steps", 0);
  if (rec.interval_steps < 0 || rec.interval_steps > step)
    bad(strcat("header field \"interval_steps\" is ", rec.interval_steps, " at step ", step));
  rec.first_loss = header_field<double>(ck, "first_loss", 0.0);
  rec.last_eval_loss = header_field<double>(ck, "last_eval_loss", -1.0);
  // The last logged loss (null or absent: none logged yet, or an older checkpoint): a run resumed
  // at its last step reports it in summary.json as the run that wrote it did.
  const auto it_l = ck.header.find("last_loss");
  rec.last_loss = it_l != ck.header.end() && !it_l->is_null() ? header_field<double>(ck, "last_loss", 0.0) : std::nan("");
  rec.last_eval_accuracy = header_field<double>(ck, "last_eval_accuracy", -1.0);
  rec.train_seconds = header_field<double>(ck, "train_seconds", 0.0);
  rec.wall_seconds = header_field<double>(ck, "wall_seconds", rec.train_seconds);
  // The half-finished interval's training time (older checkpoints: unknown, unless it is empty).
  const auto it_s = ck.header.find("interval_seconds");
  rec.interval_seconds = it_s != ck.header.end() && !it_s->is_null() ? header_field<double>(ck, "interval_seconds", 0.0)
                         : rec.interval_steps == 0                   ? 0.0
                                                                     : std::nan("");
  if (!in_range(rec.first_loss, 0.0, 3.4e38)) bad(strcat("header field \"first_loss\" is ", rec.first_loss));
  if (!std::isnan(rec.last_loss) && !in_range(rec.last_loss, 0.0, 3.4e38))
    bad(strcat("header field \"last_loss\" is ", rec.last_loss));
  if (!(rec.last_eval_loss == -1.0 || in_range(rec.last_eval_loss, 0.0, 3.4e38)))
    bad(strcat("header field \"last_eval_loss\" is ", rec.last_eval_loss));
  if (!(rec.last_eval_accuracy == -1.0 || in_range(rec.last_eval_accuracy, 0.0, 1.0)))
    bad(strcat("header field \"last_eval_accuracy\" is ", rec.last_eval_accuracy));
  if (!in_range(rec.train_seconds, 0.0, 1e12)) bad(strcat("header field \"train_seconds\" is ", rec.train_seconds));
  if (!in_range(rec.wall_seconds, 0.0, 1e12)) bad(strcat("header field \"wall_seconds\" is ", rec.wall_seconds));
  if (!std::isnan(rec.interval_seconds) && !in_range(rec.interval_seconds, 0.0, rec.train_seconds))
    bad(strcat("header field \"interval_seconds\" is ", rec.interval_seconds, " (train_seconds ", rec.train_seconds, ")"));
  // The initial weights' params_hash (model.init_from runs; absent otherwise and in older files).
  if (const auto it = ck.header.find("init_params_hash"); it != ck.header.end()) {
    if (!it->is_string() || !valid_run_id(it->get<std::string>()))
      bad(strcat("header field \"init_params_hash\" is ", printable(it->dump(), 40), ", not 16 hex digits"));
    rec.init_params_hash = it->get<std::string>();
  }
  return rec;
}

}  // namespace

void CheckpointIO::apply(const std::string& bytes, const std::string& path, RunRecord& record) {
  Resumed r;
  run_agreed(world_, [&] {
    drills_.fail_setup("resume");
    r = validate(parse_checkpoint(bytes, path.empty() ? "checkpoint from rank 0" : path), path);
    derive(r);
  });
  load_weights();
  load(r, record);
}

// Every field but the weights, which rank 0 validated before sending the rest (validate_weights).
CheckpointIO::Resumed CheckpointIO::validate(const Checkpoint& ck, const std::string& path) const {
  const Bad bad{path};
  Resumed r;
  r.step = ck.step();

  // The scaler's state, validated and adapted to this run's settings by its own policy.
  r.world_then = header_field<int64_t>(ck, "world_size", -1);
  if (r.world_then < 1 || r.world_then > (int64_t(1) << 24)) bad(strcat("header field \"world_size\" is ", r.world_then));
  ScalerState saved;
  std::memcpy(&saved, section(ck, bad, "scaler", sizeof saved).data(), sizeof saved);
  std::string scaler_error;
  const std::string hysteresis_then = config_then(ck, "precision.loss_scale.hysteresis");
  r.scaler = scaler_resume(saved, header_field<std::string>(ck, "loss_scale_mode", ""), cfg_.precision.scaler, r.step,
                           int64_t(layout_.tensors.size()), r.world_then, &scaler_error,
                           hysteresis_then.empty() ? -1 : std::strtoll(hysteresis_then.c_str(), nullptr, 10));
  if (!scaler_error.empty()) bad(scaler_error);

  // The half-finished log interval: every writing rank's sums, finite and >= 0.
  const auto& rs = section(ck, bad, "rank_sums", size_t(r.world_then) * sizeof(RankIntervalSums));
  r.sums_then.resize(size_t(r.world_then));
  std::memcpy(r.sums_then.data(), rs.data(), rs.size());
  for (const RankIntervalSums& s : r.sums_then)
    if (!(std::isfinite(s.loss_sum) && s.loss_sum >= 0.0f) || s.correct < 0)
      bad(strcat("the half-finished log interval's sums (loss ", s.loss_sum, ", hits ", s.correct,
                 ") are not finite non-negative numbers"));
  r.record = validated_record(ck, bad, r.step);

  // Where the data stands: recorded by the writer (any global batch); older checkpoints hold only
  // the step and their global batch, which was constant over their run.
  r.batch_then = header_field<int64_t>(ck, "global_batch", 0);
  if (r.batch_then < 1) bad(strcat("header field \"global_batch\" is ", r.batch_then));
  const uint64_t n_samples = sampler_.samples();
  const uint64_t spe_then = n_samples / uint64_t(r.batch_then);
  if (spe_then == 0)
    bad(strcat("its global batch of ", r.batch_then, " is larger than the ", n_samples, " training samples"));
  r.pos = DataPosition{int64_t(uint64_t(r.step) / spe_then), uint64_t(r.step) % spe_then * uint64_t(r.batch_then)};
  r.pos.epoch = header_field<int64_t>(ck, "data_epoch", r.pos.epoch);
  r.pos.offset = uint64_t(header_field<int64_t>(ck, "data_offset", int64_t(r.pos.offset)));
  if (r.pos.epoch < 0 || r.pos.epoch > r.step || r.pos.offset > n_samples)  // every epoch takes a step at least
    bad(strcat("the data position (epoch ", r.pos.epoch, ", sample ", r.pos.offset, ") is outside the ", n_samples,
               " training samples"));
  r.samples = header_field<int64_t>(ck, "samples_consumed", r.step * r.batch_then);
  if (r.samples < 0) bad(strcat("header field \"samples_consumed\" is ", r.samples));
  r.zero_then = header_field<int64_t>(ck, "zero", 0);
  r.precision_then = header_field<std::string>(ck, "precision", compute_name(cfg_));
  validate_fp8(ck, path, r);
  return r;
}

// The FP8 scales and histories: taken when the writer had the same FP8 tensors and history length
// (every value checked: scales powers of two in pow2_floor's range, amaxes finite and >= 0, the
// ring position inside the ring); otherwise they start anew (scale 1, empty history), said once.
void CheckpointIO::validate_fp8(const Checkpoint& ck, const std::string& path, Resumed& r) const {
  const Bad bad{path};
  const Fp8State* f = step_.amp().fp8();
  if (!f) return;
  std::vector<std::string> names;
  for (const Fp8Tensor& t : f->tensors()) names.push_back(t.name);
  const size_t n = names.size(), len = size_t(f->params().history);
  // Another history length: the state does not carry over (a note, before any value is checked).
  if (const auto fh = ck.header.find("fp8"); fh != ck.header.end() && fh->is_object()) {
    const auto ah = fh->find("amax_history");
    if (ah == fh->end() || !ah->is_number_integer() || ah->get<int64_t>() != int64_t(len)) {
      r.fp8_note = "the checkpoint's precision.fp8.amax_history differs from this run's: the FP8 scales start at 1";
      return;
    }
  }
  std::string why;
  r.fp8.scales = checkpoint_fp8_scales(ck, f->tensors(), &why);
  if (r.fp8.scales.empty()) {
    r.fp8_note = strcat("the checkpoint ", why, ": the FP8 scales start at 1");
    return;
  }
  r.fp8.history = floats(section(ck, bad, "fp8_history", n * len * sizeof(float)));
  std::memcpy(&r.fp8.meta, section(ck, bad, "fp8_meta", sizeof r.fp8.meta).data(), sizeof r.fp8.meta);
  for (size_t i = 0; i < r.fp8.history.size(); ++i)
    if (!(std::isfinite(r.fp8.history[i]) && r.fp8.history[i] >= 0.0f))
      bad(strcat("an amax in the FP8 history of ", names[i / len], " is ", r.fp8.history[i], ", not finite and >= 0"));
  if (r.fp8.meta.newest < -1 || r.fp8.meta.newest >= int32_t(len) || r.fp8.meta.recorded < 0)
    bad(strcat("the FP8 history's position ", r.fp8.meta.newest, " (", r.fp8.meta.recorded,
               " steps recorded) is outside its ring of ", len));
  r.fp8_loaded = true;
}

// Rank 0: the weights' sections stay in the file, each piece scanned as the file is verified: the
// first element that is not finite, and the first finite one below zero, of each.
SectionStream CheckpointIO::weight_stream() {
  SectionStream stream;
  stream.names = {"master", "state1", "state2"};
  stream.piece = TrainStep::kStreamElements * sizeof(float);
  stream.visit = [this](const std::string& name, uint64_t at, const char* data, size_t n) {
    SectionScan& scan = scans_[name];
    if (at == 0 && n == 0) scan = SectionScan{};  // a section's first call (another file's scan is void)
    // A piece starts at a multiple of 4 bytes (the piece size is): its floats in place, in the
    // buffer's operator new alignment. A size that is no multiple of 4 is refused by validate_weights.
    const float* v = reinterpret_cast<const float*>(data);
    const size_t first = size_t(at / sizeof(float));
    for (size_t j = 0; j < n / sizeof(float); ++j) {
      if (!std::isfinite(v[j])) {
        if (scan.first_nonfinite == SIZE_MAX) {
          scan.first_nonfinite = first + j;
          scan.nonfinite = v[j];
        }
      } else if (v[j] < 0.0f && scan.first_negative == SIZE_MAX) {
        scan.first_negative = first + j;
        scan.negative = v[j];
      }
    }
  };
  return stream;
}

// The weights: the header's hash of the masters (a master section from another file does not
// pass), every value finite; the optimizer moments finite, and AdamW's second moment (a running
// mean of squares) >= 0: a value the optimizer cannot have written is the file's fault, named here,
// not a later NaN's. Judged from the scans made as the file was verified (weight_stream).
void CheckpointIO::validate_weights(const Checkpoint& ck, const std::string& path) const {
  const Bad bad{path};
  const size_t n = layout_.total;
  auto where = [&](size_t i) {  // element i of the flat buffers: its tensor and index, or padding
    for (const ParamInfo& t : layout_.tensors)
      if (i >= t.span.offset && i < t.span.offset + t.span.count) return strcat(t.name, "[", i - t.span.offset, "]");
    return strcat("padding element ", i);
  };
  const auto in_file = [&](const char* name) -> const FileSection& { return sized(ck.in_file, bad, name, n * sizeof(float)); };
  const FileSection& master = in_file("master");
  const std::string hash_then = header_field<std::string>(ck, "params_hash", "");
  if (const std::string hash_now = hex64(master.hash); !hash_then.empty() && hash_then != hash_now)
    bad(strcat("its master weights hash to ", hash_now, ", not to the header's params_hash ", hash_then,
               ": the sections were replaced or corrupted"));
  if (const SectionScan& m = scans_.at("master"); m.first_nonfinite != SIZE_MAX)
    bad(strcat("master weight ", where(m.first_nonfinite), " is not finite (", m.nonfinite,
               "): the run it comes from had diverged"));
  const bool adam = cfg_.optimizer.params.kind == OptimizerKind::AdamW;
  for (int which : {1, 2}) {
    if (!step_.has_state(which)) continue;
    const char* name = which == 1 ? "state1" : "state2";
    in_file(name);
    const SectionScan& sc = scans_.at(name);
    const char* what = adam ? (which == 1 ? "AdamW first moment" : "AdamW second moment") : "SGD momentum";
    const bool signed_ok = !(adam && which == 2);
    // The first element that is refused: not finite, or (AdamW's second moment) below zero.
    const bool negative_first = !signed_ok && sc.first_negative < sc.first_nonfinite;
    const size_t i = negative_first ? sc.first_negative : sc.first_nonfinite;
    if (i != SIZE_MAX)
      bad(strcat("optimizer state (", what, ") of ", where(i), " is ", negative_first ? sc.negative : sc.nonfinite,
                 signed_ok ? ", not finite" : ", not a finite number >= 0",
                 ": the file is corrupt or was not written by this program"));
  }
}

void CheckpointIO::derive(Resumed& r) const {
  // Every rank continues its own half-finished log interval; with another world size rank 0
  // carries the old ranks' sums together.
  if (r.world_then == world_.size()) {
    r.sums = r.sums_then[size_t(world_.rank())];
  } else if (world_.rank() == 0) {
    for (const RankIntervalSums& theirs : r.sums_then) {
      r.sums.loss_sum += theirs.loss_sum;
      r.sums.correct += theirs.correct;
    }
  }
  // The sums count the writer's samples per step: with another global batch they are rescaled to
  // this run's, so the interval's logged mean weighs each step alike.
  const bool batch_changed = r.batch_then != int64_t(sampler_.global_batch());
  if (batch_changed) {
    const double k = double(sampler_.global_batch()) / double(r.batch_then);
    r.sums.loss_sum = float(double(r.sums.loss_sum) * k);
    r.sums.correct = int32_t(std::min<double>(std::llround(double(r.sums.correct) * k), INT32_MAX));
  }
  if (world_.rank() != 0) return;
  if (r.world_then != world_.size() || r.zero_then != cfg_.distributed.zero || batch_changed)
    reporter_.message(strcat("elastic resume: the checkpoint was written by ", r.world_then,
                             " rank(s) with distributed.zero ", r.zero_then, " (global batch ", r.batch_then,
                             "); this run has ", world_.size(), " rank(s) with distributed.zero ",
                             cfg_.distributed.zero, " (global batch ", sampler_.global_batch(),
                             "): masters and optimizer state load whole; the data continues at sample ", r.pos.offset,
                             " of epoch ", r.pos.epoch, " (", r.samples, " samples consumed)",
                             batch_changed ? "; the global batch changed (adjust data.batch_size or "
                                             "data.grad_accum_steps to keep it)"
                                           : ""));
  if (r.precision_then != compute_name(cfg_))
    reporter_.message(strcat("note: the checkpoint was written with ", r.precision_then, " compute, this run computes in ",
                             compute_name(cfg_), ": the FP32 masters and optimizer moments load as they are and the ",
                             "working copy is cast from the masters anew"));
  if (!r.scaler.note.empty()) reporter_.message("note: " + r.scaler.note);
  if (!r.fp8_note.empty()) reporter_.message("note: " + r.fp8_note);
}

// The validated weight sections from rank 0's file to every rank, a piece at a time (collective).
// A read that fails on rank 0, or a file changed in place since it was verified, is its error,
// agreed once every piece of the section went out (broadcast_pieces): the run stops, nothing
// trains on them.
void CheckpointIO::load_weights() {
  using Slot = TrainStep::Slot;
  const std::pair<Slot, const char*> slots[] = {{Slot::Masters, "master"}, {Slot::State1, "state1"}, {Slot::State2, "state2"}};
  for (const auto& [slot, name] : slots) {
    if (slot != Slot::Masters && !step_.has_state(slot == Slot::State1 ? 1 : 2)) continue;
    const std::unique_ptr<WeightPieces> in = world_.rank() == 0 ? checkpoint_section_pieces(located_, name) : nullptr;
    broadcast_pieces(world_, in.get(), layout_.total,
                     [&](size_t begin, const float* v, size_t count) { step_.load(slot, begin, v, count); });
  }
  located_ = Checkpoint{};  // the file closes
  scans_.clear();
}

void CheckpointIO::load(const Resumed& r, RunRecord& record) {
  step_.amp().load(r.scaler.state);
  if (r.fp8_loaded) step_.amp().fp8()->load(r.fp8);
  step_.load_sums(r.sums.loss_sum, r.sums.correct);
  sampler_.resume_at(r.step, r.pos);
  resumed_step_ = r.step;
  samples_before_ = uint64_t(r.samples);
  record.interval_steps = r.record.interval_steps;
  record.first_loss = r.record.first_loss;
  record.last_loss = r.record.last_loss;
  record.last_eval_loss = r.record.last_eval_loss;
  record.last_eval_accuracy = r.record.last_eval_accuracy;
  record.train_seconds = r.record.train_seconds;
  record.interval_seconds = r.record.interval_seconds;
  record.wall_seconds = r.record.wall_seconds;
  record.init_params_hash = r.record.init_params_hash;
}

}  // namespace amp
