// Config loading: the key table (kKeys) drives defaults, parsing, validation, printing and --help.
// Every error names where the bad value came from: FILE:LINE:COL, or the --set argument.
#include "config/config.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <variant>

#include "core/error.h"
#include "core/hash.h"

namespace amp {
namespace {

using FieldRef = std::variant<int64_t*, double*, bool*, std::string*, std::vector<int64_t>*,
                              std::vector<FaultSpec>*>;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kFloatMax = std::numeric_limits<float>::max();

// Upper bounds of integer keys: what the program can do, so that no size, step count or offset
// computed from a config value can overflow. Sizes derived from several keys (parameters, buffers)
// are checked again where they are computed.
// Steps, intervals and step numbers are at most kMaxSteps (config.h).
constexpr double kMaxWidth = double(1 << 24);  // a layer width, classes, features, outputs
constexpr double kMaxLayers = 256;             // hidden layers
constexpr double kMaxBatch = double(1 << 24);  // samples per rank per batch
constexpr double kMaxSamples = 1e9;            // synthetic data set sizes
constexpr double kMaxThreads = 1024;           // CPU threads per rank
constexpr double kMaxRank = 1 << 20;           // a rank number in fault drills
constexpr double kInt32Max = double(std::numeric_limits<int32_t>::max());
constexpr double kMaxBucketMb = 1 << 16;       // 64 GiB

// Allowed range of a number (or of each element of a list of integers). Numbers are finite
// unless inf_ok; every number must also be representable in FP32 (the step's arithmetic).
struct Range {
  double lo = -kInf, hi = kInf;
  bool lo_open = false, hi_open = false;
  bool inf_ok = false;
};
Range between(double lo, double hi, bool lo_open = false, bool hi_open = false) {
  return Range{lo, hi, lo_open, hi_open};
}
Range at_least(double lo) { return between(lo, kFloatMax); }
Range above(double lo) { return between(lo, kFloatMax, true); }
Range count_upto(double hi) { return between(0, hi); }       // integers 0..hi
Range positive_upto(double hi) { return between(1, hi); }    // integers 1..hi
Range above_or_inf(double lo) { Range r = above(lo); r.hi = kInf; r.inf_ok = true; return r; }

struct Key {
  const char* path;
  const char* def;   // default, as YAML text
  const char* help;
  FieldRef (*field)(Config&);
  Range range = {};
  std::vector<const char*> choices = {};  // non-empty: an enumeration
};

#define F(m) [](Config& c) -> FieldRef { return &c.m; }

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
      {"run.cuda_graph", "true", "CUDA: capture the step into a graph after warm-up and replay it", F(run.cuda_graph)},
      {"run.max_loss_ratio", "10000", "stop as diverged (exit 5) when a log interval's mean training loss exceeds this multiple of step 1's (0: off)", F(run.max_loss_ratio), at_least(0)},
      {"run.progress", "\"auto\"", "progress output (auto: bar on a terminal, lines otherwise)", F(run.progress), {}, {"auto", "bar", "lines", "off"}},
      // model
      {"model.type", "\"mlp\"", "model family", F(model.type), {}, {"mlp"}},
      {"model.hidden", "[1024, 1024]", "hidden layer widths (input and output come from the data)", F(model.hidden), positive_upto(kMaxWidth)},
      {"model.activation", "\"relu\"", "hidden activation", F(model.activation), {}, {"relu", "gelu"}},
      {"model.init", "\"pytorch\"", "weight init: pytorch (U(+-1/sqrt(fan_in))), xavier, normal (std init_std)", F(model.init), {}, {"pytorch", "xavier", "normal"}},
      {"model.loss_weight", "1", "coefficient of the training loss (gradients scale with it; reported losses do not)", F(model.loss_weight), above(0)},
      {"model.init_std", "0.01", "standard deviation of model.init=normal", F(model.init_std), above(0)},
      // data
      {"data.format", "\"idx\"", "data source", F(data.format), {}, {"idx", "csv", "synthetic"}},
      {"data.train_images", "\"/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz\"", "IDX training inputs (raw or .gz)", F(data.train_images)},
      {"data.train_labels", "\"/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz\"", "IDX training labels", F(data.train_labels)},
      {"data.eval_images", "\"/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz\"", "IDX evaluation inputs (\"\": no evaluation)", F(data.eval_images)},
      {"data.eval_labels", "\"/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz\"", "IDX evaluation labels", F(data.eval_labels)},
      {"data.train_csv", "\"\"", "CSV training file", F(data.train_csv)},
      {"data.eval_csv", "\"\"", "CSV evaluation file (\"\": split off data.eval_fraction)", F(data.eval_csv)},
      {"data.csv_header", "true", "CSV files start with a header line", F(data.csv_header)},
      {"data.target", "\"\"", "CSV target column: name or 0-based index (\"\": last column)", F(data.target)},
      {"data.task", "\"classification\"", "CSV task", F(data.task), {}, {"classification", "regression"}},
      {"data.eval_fraction", "0", "CSV: fraction of the training file held out for evaluation", F(data.eval_fraction), between(0, 1, false, true)},
      {"data.n_classes", "0", "classes (0: largest training label + 1)", F(data.n_classes), count_upto(kMaxWidth)},
      {"data.normalize", "\"none\"", "feature normalization fitted on the training set", F(data.normalize), {}, {"none", "global", "per_feature"}},
      {"data.batch_size", "128", "samples per rank per step (global batch = batch_size x ranks)", F(data.batch_size), positive_upto(kMaxBatch)},
      {"data.eval_batch_size", "1000", "samples per rank per evaluation batch", F(data.eval_batch_size), positive_upto(kMaxBatch)},
      {"data.shuffle", "true", "reshuffle the training set every epoch (seeded, same on every rank)", F(data.shuffle)},
      {"data.synthetic.train_samples", "1024", "synthetic regression: training samples", F(data.synthetic.train_samples), positive_upto(kMaxSamples)},
      {"data.synthetic.eval_samples", "256", "synthetic regression: evaluation samples (0: none)", F(data.synthetic.eval_samples), count_upto(kMaxSamples)},
      {"data.synthetic.features", "10", "synthetic regression: input features", F(data.synthetic.features), positive_upto(kMaxWidth)},
      {"data.synthetic.outputs", "1", "synthetic regression: outputs", F(data.synthetic.outputs), positive_upto(kMaxWidth)},
      {"data.synthetic.noise", "0.1", "synthetic regression: noise standard deviation", F(data.synthetic.noise), at_least(0)},
      // precision
      {"precision.compute", "\"fp16\"", "compute precision of GEMMs and activations (masters stay FP32)", F(precision.compute), {}, {"fp32", "fp16", "bf16"}},
      {"precision.loss_scale.mode", "\"auto\"", "loss scaling (auto: dynamic for fp16, none otherwise)", F(precision.loss_scale.mode), {}, {"auto", "none", "static", "dynamic"}},
      {"precision.loss_scale.init_scale", "65536", "initial (dynamic) or fixed (static) loss scale", F(precision.loss_scale.init_scale), above(0)},
      {"precision.loss_scale.growth_factor", "2", "dynamic: scale multiplier after growth_interval clean steps", F(precision.loss_scale.growth_factor), above(1)},
      {"precision.loss_scale.backoff_factor", "0.5", "dynamic: scale multiplier on overflow", F(precision.loss_scale.backoff_factor), between(0, 1, true, true)},
      {"precision.loss_scale.growth_interval", "2000", "dynamic: consecutive clean steps before growth", F(precision.loss_scale.growth_interval), positive_upto(kInt32Max)},
      {"precision.loss_scale.hysteresis", "1", "dynamic: overflows tolerated before backing off (1: PyTorch)", F(precision.loss_scale.hysteresis), positive_upto(kInt32Max)},
      {"precision.loss_scale.min_scale", "1", "dynamic: lower clamp of the scale", F(precision.loss_scale.min_scale), above(0)},
      {"precision.loss_scale.max_scale", ".inf", "dynamic: upper clamp of the scale", F(precision.loss_scale.max_scale), above_or_inf(0)},
      {"precision.loss_scale.divergence_steps", "20", "consecutive overflowing steps at the minimum scale that end the run", F(precision.loss_scale.divergence_steps), positive_upto(kInt32Max)},
      {"precision.telemetry_interval", "0", "steps between per-layer gradient underflow telemetry (0: off)", F(precision.telemetry_interval), count_upto(kMaxSteps)},
      // optimizer
      {"optimizer.type", "\"adamw\"", "optimizer on the FP32 master weights", F(optimizer.type), {}, {"sgd", "adamw"}},
      {"optimizer.lr", "0.001", "peak learning rate", F(optimizer.lr), above(0)},
      {"optimizer.momentum", "0", "SGD momentum", F(optimizer.momentum), between(0, 1, false, true)},
      {"optimizer.nesterov", "false", "SGD Nesterov momentum", F(optimizer.nesterov)},
      {"optimizer.weight_decay", "0", "decoupled (AdamW) or L2 (SGD) weight decay", F(optimizer.weight_decay), at_least(0)},
      {"optimizer.beta1", "0.9", "AdamW beta1", F(optimizer.beta1), between(0, 1, false, true)},
      {"optimizer.beta2", "0.999", "AdamW beta2", F(optimizer.beta2), between(0, 1, false, true)},
      {"optimizer.eps", "1e-8", "AdamW epsilon", F(optimizer.eps), above(0)},
      {"optimizer.grad_clip", "0", "clip the global gradient norm to this value (0: off)", F(optimizer.grad_clip), at_least(0)},
      {"optimizer.schedule", "\"constant\"", "learning-rate schedule", F(optimizer.schedule), {}, {"constant", "warmup_cosine"}},
      {"optimizer.warmup_steps", "0", "warmup_cosine: linear warm-up steps", F(optimizer.warmup_steps), count_upto(kMaxSteps)},
      {"optimizer.min_lr", "0", "warmup_cosine: final learning rate", F(optimizer.min_lr), at_least(0)},
      // distributed
      {"distributed.comm", "\"auto\"", "gradient communicator (auto: nccl on CUDA, mpi on CPU)", F(distributed.comm), {}, {"auto", "mpi", "nccl"}},
      {"distributed.overlap", "\"auto\"", "all-reduce buckets during backward (auto: on GPUs, and on CPUs with a core to spare)", F(distributed.overlap), {}, {"auto", "on", "off"}},
      {"distributed.bucket_mb", "25", "gradient bucket size in MiB", F(distributed.bucket_mb), between(0, kMaxBucketMb, true), {}},
      {"distributed.first_bucket_mb", "1", "size of the first (last-layer) bucket in MiB", F(distributed.first_bucket_mb), between(0, kMaxBucketMb, true), {}},
      {"distributed.timeout_s", "600", "collective watchdog: a collective without progress for this long ends the job, naming the ranks it waits for", F(distributed.timeout_s), between(0, 1e7, true)},
      {"distributed.hash_interval", "100", "steps between cross-rank parameter hash checks (0: only at the end)", F(distributed.hash_interval), count_upto(kMaxSteps), {}},
      // checkpoint
      {"checkpoint.interval", "0", "steps between checkpoints (0: none periodic)", F(checkpoint.interval), count_upto(kMaxSteps)},
      {"checkpoint.keep", "3", "checkpoints kept (older ones are deleted)", F(checkpoint.keep), positive_upto(1e6)},
      {"checkpoint.final", "true", "write a checkpoint at the end of the run", F(checkpoint.final)},
      {"checkpoint.on_signal", "true", "checkpoint and stop on SIGTERM/SIGUSR1", F(checkpoint.on_signal)},
      {"checkpoint.dir", "\"\"", "checkpoint folder (\"\": <out_dir>/checkpoints)", F(checkpoint.dir)},
      {"checkpoint.resume", "\"none\"", "none | auto (newest intact checkpoint in dir) | PATH", F(checkpoint.resume)},
      // faults
      {"faults.inject_nonfinite", "[]", "list of {step, rank, tensor, value: inf|nan}: plant a non-finite gradient", F(faults.inject_nonfinite)},
      {"faults.corrupt_params", "[]", "list of {step, rank}: perturb one master weight on that rank after that step (desync drill)", F(faults.corrupt_params)},
      {"faults.raise_signal", "[]", "list of {step, rank, signal: TERM|USR1}: deliver a stop signal after that step", F(faults.raise_signal)},
      {"faults.fail_setup", "[]", "list of {rank, phase: backend|data|comm|resume|output}: fail that set-up phase on that rank (agreement drill)", F(faults.fail_setup)},
  };
  return k;
}
#undef F

// ---------------------------------------------------------------- helpers

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// Closest candidate within a distance that still looks like a typo, or "".
std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const auto& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  return best_d <= limit ? best : "";
}

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

std::string describe_node(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Null: return "nothing";
    case YAML::NodeType::Scalar: return "\"" + n.Scalar() + "\"";
    default: return "an undefined value";
  }
}

std::string format_number(double v) {
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string describe_range(const Range& r, bool integer) {
  const char* noun = integer ? "an integer" : "a number";
  const bool has_lo = std::isfinite(r.lo), has_hi = std::isfinite(r.hi) && r.hi < kFloatMax;
  const std::string tail = r.inf_ok ? " or .inf" : "";
  if (has_lo && !has_hi) {
    if (r.lo == 0 && r.lo_open) return (integer ? "a positive integer" : "a positive number") + tail;
    if (r.lo == 0) return (integer ? "a non-negative integer" : "a non-negative number") + tail;
    return std::string(noun) + (r.lo_open ? " > " : " >= ") + format_number(r.lo) + tail;
  }
  const auto num = [&](double v) { return integer ? std::to_string(int64_t(v)) : format_number(v); };
  if (has_lo && has_hi)
    return std::string(noun) + " in " + (r.lo_open ? "(" : "[") + num(r.lo) + ", " + num(r.hi) +
           (r.hi_open ? ")" : "]");
  return noun;
}

bool in_range(double v, const Range& r) {
  if (!std::isfinite(v) && !(r.inf_ok && v > 0)) return false;
  if (r.lo_open ? !(v > r.lo) : !(v >= r.lo)) return false;
  if (r.hi_open ? !(v < r.hi) : !(v <= r.hi)) return false;
  return true;
}

// Why a parsed number cannot be used as an FP32 value ("" when it can).
std::string float_problem(double v, const Range& r) {
  if (std::isnan(v)) return "not a number";
  if (std::isinf(v)) return r.inf_ok && v > 0 ? "" : "not finite";
  if (std::fabs(v) > kFloatMax) return "beyond the FP32 range (|x| <= 3.4e38) the step computes in";
  if (v != 0 && float(v) == 0.0f) return "too small for FP32 (it would become 0)";
  return "";
}

bool parse_double(const std::string& s, double& out) {
  static const char* kPosInf[] = {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"};
  static const char* kNegInf[] = {"-.inf", "-.Inf", "-.INF"};
  for (const char* t : kPosInf)
    if (s == t) return out = kInf, true;
  for (const char* t : kNegInf)
    if (s == t) return out = -kInf, true;
  if (s.empty()) return false;
  const char* b = s.data();
  const char* e = b + s.size();
  if (*b == '+') ++b;
  auto r = std::from_chars(b, e, out);
  return r.ec == std::errc() && r.ptr == e && !std::isnan(out);
}

bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  const char* b = s.data();
  const char* e = b + s.size();
  if (*b == '+') ++b;
  auto r = std::from_chars(b, e, out);
  if (r.ec == std::errc() && r.ptr == e) return true;
  // Accept integral values written as floats ("1e3", "2.0"), nothing else.
  double d;
  if (parse_double(s, d) && std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) {
    out = static_cast<int64_t>(d);
    return true;
  }
  return false;
}

bool parse_bool(const std::string& s, bool& out) {
  static const char* kTrue[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
  static const char* kFalse[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"};
  for (const char* t : kTrue)
    if (s == t) return out = true, true;
  for (const char* t : kFalse)
    if (s == t) return out = false, true;
  return false;
}

// Reports an error about one value: "config error: WHERE: key: expected X, got Y".
class Reporter {
 public:
  Reporter(std::string file, bool from_set, std::string set_arg)
      : file_(std::move(file)), from_set_(from_set), set_arg_(std::move(set_arg)) {}

  std::string where(const YAML::Mark& m) const {
    if (from_set_) return "--set " + set_arg_;
    if (m.is_null()) return file_;
    return file_ + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
  }
  [[noreturn]] void fail(const YAML::Mark& m, const std::string& key, const std::string& msg) const {
    throw Error(ErrorKind::Config,
                "config error: " + where(m) + ": " + (key.empty() ? "" : key + ": ") + msg);
  }

 private:
  std::string file_;
  bool from_set_;
  std::string set_arg_;
};

// YAML allows no key twice in one mapping, but yaml-cpp keeps both and lookups would take one
// silently: a repeated key or section is an error naming both places.
void check_unique_keys(const YAML::Node& map, const std::string& prefix, const Reporter& rep) {
  std::map<std::string, YAML::Mark> seen;
  for (const auto& kv : map) {
    if (!kv.first.IsScalar()) continue;
    const auto [it, fresh] = seen.emplace(kv.first.Scalar(), kv.first.Mark());
    if (!fresh)
      rep.fail(kv.first.Mark(), prefix.empty() ? kv.first.Scalar() : prefix + "." + kv.first.Scalar(),
               "appears twice in one mapping (first at " + rep.where(it->second) + "); give each key once");
  }
}

void set_value(Config& cfg, const Key& key, const YAML::Node& node, const Reporter& rep) {
  const std::string path = key.path;
  const YAML::Mark mark = node.Mark();
  FieldRef ref = key.field(cfg);
  auto expect = [&](const std::string& what) {
    rep.fail(mark, path, "expected " + what + ", got " + describe_node(node));
  };
  auto scalar = [&](const std::string& what) -> std::string {
    if (!node.IsScalar()) expect(what);
    return node.Scalar();
  };

  if (auto* p = std::get_if<double*>(&ref)) {
    const std::string what = describe_range(key.range, false);
    double v;
    if (!parse_double(scalar(what), v)) expect(what);
    if (const std::string why = float_problem(v, key.range); !why.empty())
      rep.fail(mark, path, "expected " + what + ", got " + describe_node(node) + ": " + why);
    if (!in_range(v, key.range)) expect(what);
    **p = v;
  } else if (auto* p = std::get_if<int64_t*>(&ref)) {
    const std::string what = describe_range(key.range, true);
    int64_t v;
    if (!parse_int(scalar(what), v) || !in_range(double(v), key.range)) expect(what);
    **p = v;
  } else if (auto* p = std::get_if<bool*>(&ref)) {
    bool v;
    if (!parse_bool(scalar("true or false"), v)) expect("true or false");
    **p = v;
  } else if (auto* p = std::get_if<std::string*>(&ref)) {
    std::string v;
    if (node.IsNull() && key.choices.empty()) {
      v.clear();
    } else if (!key.choices.empty()) {
      std::string list;
      std::vector<std::string> choices;
      for (const char* c : key.choices) {
        list += (list.empty() ? "" : ", ") + std::string(c);
        choices.emplace_back(c);
      }
      v = scalar("one of " + list);
      if (std::find(choices.begin(), choices.end(), v) == choices.end()) {
        const std::string near = closest(v, choices);
        rep.fail(mark, path,
                 "expected one of " + list + ", got " + describe_node(node) +
                     (near.empty() ? "" : " (did you mean \"" + near + "\"?)"));
      }
    } else {
      v = scalar("a string");
    }
    **p = v;
  } else if (auto* p = std::get_if<std::vector<int64_t>*>(&ref)) {
    std::string what = describe_range(key.range, true);  // "an integer >= 1" -> "integers >= 1"
    for (const char* art : {"an ", "a "})
      if (what.rfind(art, 0) == 0) what = what.substr(std::strlen(art));
    what = "a list of " + what.replace(what.find("integer"), 7, "integers");
    if (!node.IsSequence()) expect(what);
    std::vector<int64_t> v;
    for (const auto& item : node) {
      int64_t x;
      if (!item.IsScalar() || !parse_int(item.Scalar(), x) || !in_range(double(x), key.range))
        rep.fail(item.Mark(), path + "[" + std::to_string(v.size()) + "]",
                 "expected " + describe_range(key.range, true) + ", got " + describe_node(item));
      v.push_back(x);
    }
    **p = v;
  } else if (auto* p = std::get_if<std::vector<FaultSpec>*>(&ref)) {
    // Two lists share this shape: inject_nonfinite {step, rank, tensor, value: inf|nan} and
    // raise_signal {step, rank, signal: TERM|USR1} (the signal is kept in FaultSpec::value).
    // corrupt_params {step, rank} uses step and rank only.
    // fail_setup {rank, phase} has no step (the phase is kept in FaultSpec::value).
    const bool signal = path == "faults.raise_signal", bare = path == "faults.corrupt_params";
    const bool setup = path == "faults.fail_setup";
    const std::vector<std::string> allowed = signal  ? std::vector<std::string>{"step", "rank", "signal"}
                                             : bare  ? std::vector<std::string>{"step", "rank"}
                                             : setup ? std::vector<std::string>{"rank", "phase"}
                                                     : std::vector<std::string>{"step", "rank", "tensor", "value"};
    const std::string shape = signal ? "{step, rank, signal}"
                              : bare ? "{step, rank}"
                              : setup ? "{rank, phase}"
                                      : "{step, rank, tensor, value}";
    if (!node.IsSequence()) expect("a list of " + shape);
    std::vector<FaultSpec> v;
    for (const auto& item : node) {
      const std::string ipath = path + "[" + std::to_string(v.size()) + "]";
      if (!item.IsMap()) rep.fail(item.Mark(), ipath, "expected a mapping " + shape + ", got " + describe_node(item));
      check_unique_keys(item, ipath, rep);
      FaultSpec f;
      f.value = signal ? "TERM" : setup ? "" : "inf";
      bool have_step = setup;
      for (const auto& kv : item) {
        const std::string k = kv.first.Scalar();
        const YAML::Node& val = kv.second;
        int64_t x;
        if ((k == "step" && !setup) || k == "rank") {
          const bool is_step = k == "step";
          const Range r = is_step ? positive_upto(kMaxSteps) : count_upto(kMaxRank);
          if (!val.IsScalar() || !parse_int(val.Scalar(), x) || !in_range(double(x), r))
            rep.fail(val.Mark(), ipath + "." + k, "expected " + describe_range(r, true) + ", got " + describe_node(val));
          (is_step ? f.step : f.rank) = x;
          have_step |= is_step;
        } else if (k == "tensor" && !signal && !bare) {
          if (!val.IsScalar()) rep.fail(val.Mark(), ipath + ".tensor", "expected a tensor name, got " + describe_node(val));
          f.tensor = val.Scalar();
        } else if (k == "value" && !signal && !bare) {
          if (!val.IsScalar() || (val.Scalar() != "inf" && val.Scalar() != "nan"))
            rep.fail(val.Mark(), ipath + ".value", "expected inf or nan, got " + describe_node(val));
          f.value = val.Scalar();
        } else if (k == "phase" && setup) {
          static const std::vector<std::string> kPhases = {"backend", "data", "comm", "resume", "output"};
          if (!val.IsScalar() || std::find(kPhases.begin(), kPhases.end(), val.Scalar()) == kPhases.end())
            rep.fail(val.Mark(), ipath + ".phase", "expected backend, data, comm, resume or output, got " + describe_node(val));
          f.value = val.Scalar();
        } else if (k == "signal" && signal) {
          if (!val.IsScalar() || (val.Scalar() != "TERM" && val.Scalar() != "USR1"))
            rep.fail(val.Mark(), ipath + ".signal", "expected TERM or USR1, got " + describe_node(val));
          f.value = val.Scalar();
        } else {
          const std::string near = closest(k, allowed);
          rep.fail(kv.first.Mark(), ipath + "." + k,
                   "unknown key" + (near.empty() ? std::string() : " (did you mean \"" + near + "\"?)"));
        }
      }
      if (!have_step) rep.fail(item.Mark(), ipath, "missing key \"step\"");
      if (setup && f.value.empty()) rep.fail(item.Mark(), ipath, "missing key \"phase\"");
      v.push_back(f);
    }
    **p = v;
  }
}

void unknown_key(const std::string& path, const YAML::Mark& m, const Reporter& rep) {
  const std::string near = closest(path, all_paths());
  rep.fail(m, path, "unknown key" + (near.empty() ? std::string() : " (did you mean \"" + near + "\"?)"));
}

void apply_key(Config& cfg, const Key& key, const YAML::Node& value, const Reporter& rep,
               const std::string& origin) {
  set_value(cfg, key, value, rep);
  cfg.origin[key.path] = origin;
}

void walk(Config& cfg, const YAML::Node& map, const std::string& prefix, const Reporter& rep) {
  check_unique_keys(map, prefix, rep);
  for (const auto& kv : map) {
    const YAML::Node& k = kv.first;
    if (!k.IsScalar()) rep.fail(k.Mark(), prefix, "expected a key name, got " + describe_node(k));
    const std::string path = prefix.empty() ? k.Scalar() : prefix + "." + k.Scalar();
    if (const Key* key = find_key(path)) {
      apply_key(cfg, *key, kv.second, rep, rep.where(kv.second.Mark()));
    } else if (is_section(path)) {
      if (kv.second.IsNull()) continue;  // an empty section keeps its defaults
      if (!kv.second.IsMap())
        rep.fail(kv.second.Mark(), path, "expected a mapping of keys, got " + describe_node(kv.second));
      walk(cfg, kv.second, path, rep);
    } else {
      unknown_key(path, k.Mark(), rep);
    }
  }
}

// Counts a document's events and remembers where its first one is (yaml-cpp's own LoadAll loops
// forever, allocating, on a stray leading ',': the documents are walked here, at most two).
struct DocumentProbe final : YAML::EventHandler {
  int events = 0;
  YAML::Mark first = YAML::Mark::null_mark();
  void note(const YAML::Mark& m) {
    if (events++ == 0) first = m;
  }
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& m, YAML::anchor_t) override { note(m); }
  void OnAlias(const YAML::Mark& m, YAML::anchor_t) override { note(m); }
  void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t, const std::string&) override { note(m); }
  void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    note(m);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    note(m);
  }
  void OnMapEnd() override {}
};

// One YAML document (a second one is an error, not silently ignored). yaml-cpp stops deep nesting
// with an exception whose message says only "bad file": that case gets a message of its own.
YAML::Node parse_yaml(const std::string& text, const Reporter& rep, const std::string& key = "") {
  const std::string what = key.empty() ? "malformed YAML: " : "malformed value: ";
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentProbe one, two;
    if (parser.HandleNextDocument(one) && parser.HandleNextDocument(two)) {
      const bool stuck = two.first.pos == one.first.pos;  // the parser made no progress
      if (stuck) rep.fail(one.first, key, what + "unexpected character where a value should start");
      rep.fail(two.first, key, "a second YAML document starts here; a config is one document (remove the '---')");
    }
    return YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {
    rep.fail(e.mark, key, what + "nested deeper than " + std::to_string(e.depth()) + " levels (a config needs 3)");
  } catch (const YAML::Exception& e) {
    rep.fail(e.mark, key, what + e.msg);
  }
}

std::string read_file_or_fail(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(ErrorKind::Config, "config error: " + path + ": cannot read: is a directory, not a YAML file");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(ErrorKind::Config, "config error: " + path + ": cannot open: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(ErrorKind::Config, "config error: " + path + ": cannot read: " + std::strerror(errno));
  return ss.str();
}

// Cross-key rules that no single key can check.
void validate(const Config& c) {
  auto fail = [&](const std::string& key, const std::string& msg) {
    auto it = c.origin.find(key);
    const std::string where = it == c.origin.end() ? c.source : it->second;
    throw Error(ErrorKind::Config, "config error: " + where + ": " + key + ": " + msg);
  };
  if (c.run.steps == 0 && c.run.epochs == 0) fail("run.epochs", "set run.steps or run.epochs to a positive value");
  if (c.data.format == "idx") {
    if (c.data.train_images.empty()) fail("data.train_images", "required when data.format is idx");
    if (c.data.train_labels.empty()) fail("data.train_labels", "required when data.format is idx");
    if (c.data.eval_images.empty() != c.data.eval_labels.empty())
      fail("data.eval_labels", "data.eval_images and data.eval_labels go together");
  } else if (c.data.format == "csv") {
    if (c.data.train_csv.empty()) fail("data.train_csv", "required when data.format is csv");
    if (!c.data.eval_csv.empty() && c.data.eval_fraction > 0)
      fail("data.eval_fraction", "give either data.eval_csv or data.eval_fraction, not both");
  }
  const auto& ls = c.precision.loss_scale;
  if (ls.min_scale > ls.max_scale) fail("precision.loss_scale.min_scale", "must not exceed max_scale");
  const std::string mode = c.loss_scale_mode();
  if (mode == "dynamic" && (ls.init_scale < ls.min_scale || ls.init_scale > ls.max_scale))
    fail("precision.loss_scale.init_scale", "must lie in [min_scale, max_scale]");
  if (!std::isfinite(ls.init_scale)) fail("precision.loss_scale.init_scale", "must be finite");
  if (c.optimizer.schedule == "warmup_cosine" && c.optimizer.min_lr > c.optimizer.lr)
    fail("optimizer.min_lr", "must not exceed optimizer.lr");
  if (c.distributed.first_bucket_mb > c.distributed.bucket_mb)
    fail("distributed.first_bucket_mb", "must not exceed distributed.bucket_mb");
}

}  // namespace

// ---------------------------------------------------------------- public

std::string Config::resolved_out_dir() const { return run.out_dir.empty() ? "runs/" + run.name : run.out_dir; }

std::string Config::resolved_checkpoint_dir() const {
  return checkpoint.dir.empty() ? resolved_out_dir() + "/checkpoints" : checkpoint.dir;
}

const char* precision_name(DType t) { return t == DType::F32 ? "fp32" : t == DType::BF16 ? "bf16" : "fp16"; }
const char* optimizer_name(OptimizerKind k) { return k == OptimizerKind::Sgd ? "sgd" : "adamw"; }
const char* scale_mode_name(ScaleMode m) {
  return m == ScaleMode::Dynamic ? "dynamic" : m == ScaleMode::Static ? "static" : "none";
}

namespace {

// The typed fields, parsed once from the validated keys.
void resolve_typed(Config& c) {
  c.model.act = c.model.activation == "gelu" ? Activation::Gelu : Activation::Relu;
  c.precision.dtype = c.precision.compute == "fp32" ? DType::F32 : c.precision.compute == "bf16" ? DType::BF16 : DType::F16;
  ScalerParams& p = c.precision.scaler;
  const std::string mode = c.loss_scale_mode();
  p.mode = mode == "dynamic" ? ScaleMode::Dynamic : mode == "static" ? ScaleMode::Static : ScaleMode::None;
  const LossScaleConfig& ls = c.precision.loss_scale;
  p.init_scale = float(ls.init_scale);
  p.growth_factor = float(ls.growth_factor);
  p.backoff_factor = float(ls.backoff_factor);
  p.growth_interval = int32_t(ls.growth_interval);  // bounded to int32 by the key table
  p.hysteresis = int32_t(ls.hysteresis);
  p.min_scale = float(ls.min_scale);
  p.max_scale = std::isinf(ls.max_scale) ? std::numeric_limits<float>::max() : float(ls.max_scale);
  OptimizerParams& o = c.optimizer.params;
  o.kind = c.optimizer.type == "sgd" ? OptimizerKind::Sgd : OptimizerKind::AdamW;
  o.momentum = float(c.optimizer.momentum);
  o.nesterov = c.optimizer.nesterov;
  o.weight_decay = float(c.optimizer.weight_decay);
  o.beta1 = float(c.optimizer.beta1);
  o.beta2 = float(c.optimizer.beta2);
  o.eps = float(c.optimizer.eps);
  c.optimizer.schedule_kind =
      c.optimizer.schedule == "warmup_cosine" ? LrSchedule::Kind::WarmupCosine : LrSchedule::Kind::Constant;
  c.distributed.overlap_mode =
      c.distributed.overlap == "on" ? Toggle::On : c.distributed.overlap == "off" ? Toggle::Off : Toggle::Auto;
}

}  // namespace

std::string Config::loss_scale_mode() const {
  if (precision.loss_scale.mode != "auto") return precision.loss_scale.mode;
  return precision.compute == "fp16" ? "dynamic" : "none";
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  Config cfg;
  cfg.source = path;
  // Defaults go through the same parser as user values.
  const Reporter def_rep("<defaults>", false, "");
  for (const auto& k : keys()) {
    set_value(cfg, k, YAML::Load(k.def), def_rep);
    cfg.origin[k.path] = "default";
  }

  const std::string text = read_file_or_fail(path);
  const Reporter file_rep(path, false, "");
  const YAML::Node root = parse_yaml(text, file_rep);
  if (root.IsNull())
    throw Error(ErrorKind::Config, "config error: " + path +
                                       ": the file is empty (expected a mapping of sections: run, model, "
                                       "data, precision, optimizer, distributed, checkpoint, faults)");
  if (!root.IsMap()) file_rep.fail(root.Mark(), "", "expected a mapping of sections at the top level, got " + describe_node(root));
  walk(cfg, root, "", file_rep);

  for (const auto& arg : overrides) {
    const size_t eq = arg.find('=');
    if (eq == std::string::npos || eq == 0)
      throw Error(ErrorKind::Config, "config error: --set " + arg + ": expected key=value (e.g. optimizer.lr=3e-4)");
    const std::string key_path = arg.substr(0, eq);
    const Reporter set_rep(path, true, arg);
    const Key* key = find_key(key_path);
    if (!key) {
      if (is_section(key_path)) set_rep.fail(YAML::Mark::null_mark(), key_path, "is a section; set one of its keys");
      unknown_key(key_path, YAML::Mark::null_mark(), set_rep);
    }
    const YAML::Node value = parse_yaml(arg.substr(eq + 1), set_rep, key_path);
    apply_key(cfg, *key, value, set_rep, "--set");
  }
  validate(cfg);
  resolve_typed(cfg);
  return cfg;
}

std::string config_to_yaml(const Config& const_cfg) {
  Config& cfg = const_cast<Config&>(const_cfg);  // field accessors are non-const; nothing is written
  std::ostringstream os;
  std::vector<std::string> open;  // currently open sections
  for (const auto& k : keys()) {
    std::vector<std::string> parts;
    std::string p = k.path;
    for (size_t s = 0, d; ; s = d + 1) {
      d = p.find('.', s);
      parts.push_back(p.substr(s, d == std::string::npos ? std::string::npos : d - s));
      if (d == std::string::npos) break;
    }
    const size_t depth = parts.size() - 1;
    size_t common = 0;
    while (common < open.size() && common < depth && open[common] == parts[common]) ++common;
    open.resize(common);
    for (size_t i = common; i < depth; ++i) {
      os << std::string(2 * i, ' ') << parts[i] << ":\n";
      open.push_back(parts[i]);
    }
    os << std::string(2 * depth, ' ') << parts.back() << ": ";
    FieldRef ref = k.field(cfg);
    std::visit(
        [&](auto* v) {
          using T = std::decay_t<decltype(*v)>;
          if constexpr (std::is_same_v<T, double>) {
            os << format_number(*v);
          } else if constexpr (std::is_same_v<T, int64_t>) {
            os << *v;
          } else if constexpr (std::is_same_v<T, bool>) {
            os << (*v ? "true" : "false");
          } else if constexpr (std::is_same_v<T, std::string>) {
            YAML::Emitter e;
            e << YAML::DoubleQuoted << *v;
            os << e.c_str();
          } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
            os << "[";
            for (size_t i = 0; i < v->size(); ++i) os << (i ? ", " : "") << (*v)[i];
            os << "]";
          } else {
            os << "[";
            for (size_t i = 0; i < v->size(); ++i) {
              const FaultSpec& f = (*v)[i];
              const std::string kp = k.path;
              os << (i ? ", " : "") << "{";
              if (kp != "faults.fail_setup") os << "step: " << f.step << ", ";
              os << "rank: " << f.rank;
              if (kp == "faults.fail_setup") {
                os << ", phase: " << f.value << "}";
              } else if (kp == "faults.raise_signal") {
                os << ", signal: " << f.value << "}";
              } else if (kp == "faults.corrupt_params") {
                os << "}";
              } else {
                YAML::Emitter e;
                e << YAML::DoubleQuoted << f.tensor;
                os << ", tensor: " << e.c_str() << ", value: " << f.value << "}";
              }
            }
            os << "]";
          }
        },
        ref);
    os << "\n";
  }
  return os.str();
}

uint64_t config_hash(const Config& c) {
  return hash64(config_to_yaml(c) + "\nversion: " AMP_VERSION "\n");
}

std::string config_keys_help() {
  std::ostringstream os;
  os << "Config keys (YAML sections; override any with --set key=value):\n";
  for (const auto& k : keys()) {
    std::string type;
    Config dummy;
    FieldRef ref = k.field(dummy);
    if (!k.choices.empty()) {
      for (const char* c : k.choices) type += (type.empty() ? "" : "|") + std::string(c);
    } else if (std::holds_alternative<double*>(ref)) {
      type = describe_range(k.range, false);
    } else if (std::holds_alternative<int64_t*>(ref)) {
      type = describe_range(k.range, true);
    } else if (std::holds_alternative<bool*>(ref)) {
      type = "bool";
    } else if (std::holds_alternative<std::string*>(ref)) {
      type = "string";
    } else {
      type = "list";
    }
    char line[512];
    std::snprintf(line, sizeof line, "  %-36s %s (default %s)\n      %s\n", k.path, type.c_str(), k.def, k.help);
    os << line;
  }
  return os.str();
}

}  // namespace amp
