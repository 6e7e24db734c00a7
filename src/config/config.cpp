// Config loading: the key table (keys.cpp) drives defaults, parsing (yaml_reader.cpp, values.cpp),
// validation, printing and --help. Every error names where the bad value came from: FILE:LINE:COL,
// or the --set argument.
#include "config/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "config/config_detail.h"
#include "core/error.h"
#include "core/hash.h"

namespace amp {

using namespace config_detail;

namespace {

// precision.loss_scale resolved: auto is dynamic for fp16 (PyTorch's GradScaler use), none otherwise.
ScaleMode resolved_scale_mode(const Config& c) {
  switch (c.precision.loss_scale) {
    case LossScaleChoice::None: return ScaleMode::None;
    case LossScaleChoice::Static: return ScaleMode::Static;
    case LossScaleChoice::Dynamic: return ScaleMode::Dynamic;
    case LossScaleChoice::Auto: break;
  }
  return c.precision.compute == DType::F16 ? ScaleMode::Dynamic : ScaleMode::None;
}

// precision.compute resolved: fp8 computes in BF16 outside the linear layers' FP8 GEMMs.
void resolve_compute(Config& c) {
  static const DType dtypes[] = {DType::F32, DType::F16, DType::BF16, DType::BF16};
  c.precision.compute = dtypes[int(c.precision.compute_choice)];
  c.precision.fp8 = c.precision.compute_choice == ComputeChoice::FP8;
}

// Cross-key rules that no single key can check.
void validate(const Config& c) {
  auto fail = [&](const std::string& key, const std::string& msg) {
    auto it = c.origin.find(key);
    const std::string where = it == c.origin.end() ? c.source : it->second;
    throw Error(ErrorKind::Config, "config error: " + where + ": " + key + ": " + msg);
  };
  if (c.run.steps == 0 && c.run.epochs == 0) fail("run.epochs", "set run.steps or run.epochs to a positive value");
  // run.name names the folder runs/<name> (when run.out_dir is not given): one plain name.
  if (c.run.out_dir.empty() &&
      (c.run.name.empty() || c.run.name == "." || c.run.name == ".." || c.run.name.find('/') != std::string::npos))
    fail("run.name", "\"" + c.run.name + "\" is not a folder name (the run folder is runs/<run.name>); give a name "
                     "without '/', or set run.out_dir");
  if (c.checkpoint.resume.empty()) fail("checkpoint.resume", "is empty: use none, auto or the path of a checkpoint");
  if (c.data.format == "idx") {
    if (c.data.train_images.empty()) fail("data.train_images", "required when data.format is idx");
    if (c.data.train_labels.empty()) fail("data.train_labels", "required when data.format is idx");
    if (c.data.eval_images.empty() != c.data.eval_labels.empty()) {
      // Name the one the user set (emptying one of the two default files, say), else the file.
      const bool images = c.given("data.eval_images") != c.given("data.eval_labels") ? c.given("data.eval_images")
                                                                                      : !c.data.eval_images.empty();
      const char* key = images ? "data.eval_images" : "data.eval_labels";
      const char* other = images ? "data.eval_labels" : "data.eval_images";
      auto value = [](const std::string& v) { return v.empty() ? std::string("empty (no evaluation)") : "\"" + v + "\""; };
      fail(key, strcat("is ", value(images ? c.data.eval_images : c.data.eval_labels), ", but ", other, " is ",
                       value(images ? c.data.eval_labels : c.data.eval_images), c.given(other) ? "" : " (the default)",
                       ": set both empty, or both to files"));
    }
  } else if (c.data.format == "csv") {
    if (c.data.train_csv.empty()) fail("data.train_csv", "required when data.format is csv");
    if (!c.data.eval_csv.empty() && c.data.eval_fraction > 0)
      fail("data.eval_fraction", "give either data.eval_csv or data.eval_fraction, not both");
  }
  // Language models: the gpt model reads token streams, and token streams need it.
  const bool tokens_data = c.data.format == "text" || c.data.format == "tokens";
  const bool gpt = c.model.type == ModelType::Gpt;
  if (gpt && !tokens_data)
    fail("model.type", "gpt needs data.format text or tokens (a token stream), not " + c.data.format);
  if (tokens_data && !gpt) fail("data.format", c.data.format + " data is a token stream for model.type gpt, not mlp");
  if (c.model.n_embd % c.model.n_head != 0)
    fail("model.n_embd", "must be a multiple of model.n_head (" + std::to_string(c.model.n_embd) + " is not divisible by " +
                             std::to_string(c.model.n_head) + ")");
  if (c.data.format == "text" && c.data.text_files.empty())
    fail("data.text_files", "required when data.format is text (a list of text files or glob patterns)");
  if (c.data.format == "tokens") {
    if (c.data.train_tokens.empty()) fail("data.train_tokens", "required when data.format is tokens (a list of token shards or glob patterns)");
    if (!c.data.eval_tokens.empty() && c.data.eval_fraction > 0)
      fail("data.eval_fraction", "give either data.eval_tokens or data.eval_fraction, not both");
  }
  if (c.data.format == "text" && c.data.tokenizer == "none")
    fail("data.tokenizer", "text needs a tokenizer to become tokens: bytes, gpt2 or auto (bytes)");
  if (tokens_data && c.data.normalize != "none")
    fail("data.normalize", "normalizes features; " + c.data.format + " data are token ids: leave it none");
  if (gpt && c.sample.tokens > 0 && c.sample.prompt.empty())
    fail("sample.prompt", "must not be empty: generation continues at least one token (or set sample.tokens to 0)");
  const ScalerParams& ls = c.precision.scaler;
  if (ls.min_scale > ls.max_scale) fail("precision.loss_scale.min_scale", "must not exceed max_scale");
  if (resolved_scale_mode(c) == ScaleMode::Dynamic && (ls.init_scale < ls.min_scale || ls.init_scale > ls.max_scale)) {
    // Blame the bound the user set when init_scale is the default (--set max_scale=1024, say).
    const bool below = ls.init_scale < ls.min_scale;
    const char* bound = below ? "precision.loss_scale.min_scale" : "precision.loss_scale.max_scale";
    if (!c.given("precision.loss_scale.init_scale") && c.given(bound))
      fail(bound, strcat(below ? ls.min_scale : ls.max_scale, " is ", below ? "above" : "below", " init_scale (",
                         ls.init_scale, ", the default): set precision.loss_scale.init_scale inside [min_scale, max_scale] too"));
    fail("precision.loss_scale.init_scale", strcat(ls.init_scale, " must lie in [min_scale, max_scale] = [", ls.min_scale,
                                                   ", ", ls.max_scale, "]"));
  }
  if (!std::isfinite(ls.init_scale)) fail("precision.loss_scale.init_scale", "must be finite");
  if (c.optimizer.schedule != LrSchedule::Kind::Constant && c.optimizer.min_lr > c.optimizer.lr)
    fail("optimizer.min_lr", "must not exceed optimizer.lr");
  if (c.distributed.zero == 2 && c.precision.telemetry_interval > 0)
    fail("precision.telemetry_interval", "reads every rank's whole gradient after the step, which distributed.zero 2 "
                                         "returns bucket by bucket during backward: use distributed.zero 1 for telemetry runs");
  if (gpt && c.model.recompute == "attention" && c.model.attention == "fused")
    fail("model.recompute", "attention recomputes the explicit path's probabilities; model.attention fused keeps none "
                            "(two FP32 numbers per position and head): use mlp or block, or model.attention explicit");
  if (c.distributed.first_bucket_mb > c.distributed.bucket_mb)
    fail("distributed.first_bucket_mb", "must not exceed distributed.bucket_mb");
}

// Values that depend on other keys: the loss-scale mode of auto, the evaluation batch of 0.
void resolve(Config& c) {
  c.precision.scaler.mode = resolved_scale_mode(c);
  if (c.data.eval_batch_size == 0) c.data.eval_batch_size = c.model.type == ModelType::Gpt ? c.data.batch_size : 1000;
}

}  // namespace

// ---------------------------------------------------------------- public

bool Config::given(const std::string& key) const {
  const auto it = origin.find(key);
  return it != origin.end() && it->second != "default";
}

std::string Config::resolved_out_dir() const { return run.out_dir.empty() ? "runs/" + run.name : run.out_dir; }

std::string Config::resolved_checkpoint_dir() const {
  return checkpoint.dir.empty() ? resolved_out_dir() + "/checkpoints" : checkpoint.dir;
}

const char* precision_name(DType t) { return t == DType::F32 ? "fp32" : t == DType::BF16 ? "bf16" : "fp16"; }
const char* compute_name(const Config& c) { return c.precision.fp8 ? "fp8" : precision_name(c.precision.compute); }
const char* optimizer_name(OptimizerKind k) { return k == OptimizerKind::Sgd ? "sgd" : "adamw"; }
const char* scale_mode_name(ScaleMode m) {
  return m == ScaleMode::Dynamic ? "dynamic" : m == ScaleMode::Static ? "static" : "none";
}

namespace {
// Every key at its default; defaults go through the same parser as user values.
Config defaults(const std::string& source) {
  Config cfg;
  cfg.source = source;
  const Reporter def_rep("<defaults>", false, "");
  for (const auto& k : keys()) {
    set_value(cfg, k, YAML::Load(k.def), def_rep);
    cfg.origin[k.path] = "default";
  }
  return cfg;
}
}  // namespace

Config config_from_values(const std::map<std::string, std::string>& values, const std::string& origin) {
  Config cfg = defaults(origin);
  for (const auto& [path, text] : values) {
    const Key* key = find_key(path);
    if (!key) continue;  // written by another version of the program
    const Reporter rep(origin + " (its recorded config)", false, "");
    apply_key(cfg, *key, parse_yaml(text, rep, path), rep, origin);
  }
  resolve_compute(cfg);
  validate(cfg);
  resolve(cfg);
  return cfg;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  Config cfg = defaults(path);

  const std::string text = read_file_or_fail(path);
  const Reporter file_rep(path, false, "");
  const YAML::Node root = parse_yaml(text, file_rep);
  if (root.IsNull())
    throw Error(ErrorKind::Config, "config error: " + path +
                                       ": the file is empty (expected a mapping of sections: run, model, "
                                       "data, precision, optimizer, distributed, checkpoint, faults, sample)");
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
    apply_key(cfg, *key, value, set_rep, "--set " + arg);
  }
  resolve_compute(cfg);
  validate(cfg);
  resolve(cfg);
  return cfg;
}

namespace {

// A key's value as config_to_yaml prints it (YAML; strings and choices double-quoted).
std::string value_text(const Key& k, Config& cfg) {
  std::ostringstream os;
  FieldRef ref = k.field(cfg);
    std::visit(
        [&](auto& alt) {
          using A = std::decay_t<decltype(alt)>;
          if constexpr (std::is_same_v<A, EnumRef>) {
            YAML::Emitter e;  // quoted like a string choice: the text (and config_hash) stays the same
            e << YAML::DoubleQuoted << k.choices.at(alt.get());
            os << e.c_str();
            return;
          } else {
          auto* v = alt;
          using T = std::decay_t<decltype(*v)>;
          if constexpr (std::is_same_v<T, double>) {
            os << format_number(*v);
          } else if constexpr (std::is_same_v<T, float>) {
            os << format_float(*v);
          } else if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, int32_t>) {
            os << *v;
          } else if constexpr (std::is_same_v<T, bool>) {
            os << (*v ? "true" : "false");
          } else if constexpr (std::is_same_v<T, std::string>) {
            YAML::Emitter e;
            e << YAML::DoubleQuoted << *v;
            os << e.c_str();
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            os << "[";
            for (size_t i = 0; i < v->size(); ++i) {
              YAML::Emitter e;
              e << YAML::DoubleQuoted << (*v)[i];
              os << (i ? ", " : "") << e.c_str();
            }
            os << "]";
          } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
            os << "[";
            for (size_t i = 0; i < v->size(); ++i) os << (i ? ", " : "") << (*v)[i];
            os << "]";
          } else {
            os << "[";
            for (size_t i = 0; i < v->size(); ++i) {
              os << (i ? ", " : "") << "{";
              for (size_t j = 0; j < k.record.size(); ++j) {
                const RecordField& f = k.record[j];
                os << (j ? ", " : "") << f.name << ": ";
                if (f.integer) {
                  os << (*v)[i].*f.integer;
                } else if (f.quoted) {
                  YAML::Emitter e;
                  e << YAML::DoubleQuoted << (*v)[i].*f.text;
                  os << e.c_str();
                } else {
                  os << (*v)[i].*f.text;
                }
              }
              os << "}";
            }
            os << "]";
          }
          }
        },
        ref);
  return os.str();
}

}  // namespace

std::map<std::string, std::string> config_values(const Config& const_cfg) {
  Config& cfg = const_cast<Config&>(const_cfg);  // field accessors are non-const; nothing is written
  std::map<std::string, std::string> out;
  for (const auto& k : keys()) out[k.path] = value_text(k, cfg);
  return out;
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
    os << value_text(k, cfg);
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
    } else if (std::holds_alternative<double*>(ref) || std::holds_alternative<float*>(ref)) {
      type = describe_range(k.range, false);
    } else if (std::holds_alternative<int64_t*>(ref) || std::holds_alternative<int32_t*>(ref)) {
      type = describe_range(k.range, true);
    } else if (std::holds_alternative<bool*>(ref)) {
      type = "bool";
    } else if (std::holds_alternative<std::string*>(ref)) {
      type = "string";
    } else if (std::holds_alternative<std::vector<std::string>*>(ref)) {
      type = "list of strings";
    } else {
      type = "list";
    }
    std::string path = k.path;
    path.resize(std::max<size_t>(path.size(), 36), ' ');
    os << "  " << path << ' ' << type << " (default " << k.def << ")\n      " << k.help << '\n';
  }
  return os.str();
}

}  // namespace amp
