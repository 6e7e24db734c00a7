// Internals of the config loader, shared by its files: the key table (keys.cpp), value parsing
// and formatting (values.cpp), the YAML reader (yaml_reader.cpp) and the public functions
// (config.cpp). Nothing outside src/config/ includes this.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "config/config.h"
#include "core/error.h"

namespace amp::config_detail {

// A typed enumeration field: reads and writes the index of its value among the key's choices.
struct EnumRef {
  std::function<void(size_t)> set;
  std::function<size_t()> get;
};

// Where a key's value goes. float and int32_t fields are the ones the kernels take as they are
// (ScalerParams, OptimizerParams): parsed as double / int64, range-checked, then narrowed.
using FieldRef = std::variant<int64_t*, double*, bool*, std::string*, std::vector<int64_t>*,
                              std::vector<FaultSpec>*, float*, int32_t*, EnumRef, std::vector<std::string>*>;

// values[i] is what choice i of the key means.
template <typename E>
EnumRef enum_ref(E* field, std::vector<E> values) {
  return EnumRef{[field, values](size_t i) { *field = values.at(i); },
                 [field, values]() {
                   for (size_t i = 0; i < values.size(); ++i)
                     if (values[i] == *field) return i;
                   return size_t(0);
                 }};
}

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kFloatMax = std::numeric_limits<float>::max();

// Upper bounds of integer keys: what the program can do, so that no size, step count or offset
// computed from a config value can overflow. Sizes derived from several keys (parameters, buffers)
// are checked again where they are computed.
// Steps, intervals and step numbers are at most kMaxSteps (config.h).
constexpr double kMaxWidth = double(1 << 24);  // a layer width, classes, features, outputs
constexpr double kMaxLayers = 256;             // hidden layers
constexpr double kMaxBatch = double(1 << 24);  // samples per rank per batch
constexpr double kMaxAccum = double(1 << 16);  // micro-batches per optimizer step
constexpr double kMaxSamples = 1e9;            // synthetic data set sizes
constexpr double kMaxThreads = 1024;           // CPU threads per rank
constexpr double kMaxRank = 1 << 20;           // a rank number in fault drills
constexpr double kInt32Max = double(std::numeric_limits<int32_t>::max());
constexpr double kMaxBucketMb = 1 << 16;       // 64 GiB
constexpr double kMaxHeads = 1024;             // attention heads per block
constexpr double kMaxSeqLen = 1 << 16;         // a context length (tokens)
constexpr double kMaxEmbd = 1 << 16;           // an embedding width
constexpr double kMaxGenerated = 1 << 20;      // tokens generated per text sample

// Allowed range of a number (or of each element of a list of integers). Numbers are finite
// unless inf_ok; every number must also be representable in FP32 (the step's arithmetic).
struct Range {
  double lo = -kInf, hi = kInf;
  bool lo_open = false, hi_open = false;
  bool inf_ok = false;
};

inline Range between(double lo, double hi, bool lo_open = false, bool hi_open = false) {
  return Range{lo, hi, lo_open, hi_open};
}
inline Range at_least(double lo) { return between(lo, kFloatMax); }
inline Range above(double lo) { return between(lo, kFloatMax, true); }
inline Range count_upto(double hi) { return between(0, hi); }       // integers 0..hi
inline Range positive_upto(double hi) { return between(1, hi); }    // integers 1..hi
inline Range above_or_inf(double lo) { Range r = above(lo); r.hi = kInf; r.inf_ok = true; return r; }


// A field of a record-list key (the faults.* drills, lists of {field: value} mappings): its name,
// what it takes and where it goes. Read and written by the same code as every record list, so a
// new list is a new table entry.
struct RecordField {
  const char* name;
  int64_t FaultSpec::*integer = nullptr;  // an integer within range, or
  std::string FaultSpec::*text = nullptr;  // a text: one of choices, or any non-empty scalar
  Range range = {};
  std::vector<const char*> choices = {};
  const char* what = nullptr;  // a text without choices: what it names ("a tensor name")
  const char* def = nullptr;   // the value when absent, as text (nullptr: the field is required)
  bool quoted = false;         // written double-quoted (a name)
};

struct Key {
  const char* path;
  const char* def;   // default, as YAML text
  const char* help;
  FieldRef (*field)(Config&);
  Range range = {};
  std::vector<const char*> choices = {};  // non-empty: an enumeration
  std::vector<RecordField> record = {};   // a record list (std::vector<FaultSpec>): its fields
};

// "{step, rank, tensor, value}": a record list's shape, for messages and help.
std::string record_shape(const Key& key);
// "a or b", "a, b or c".
std::string one_of(const std::vector<const char*>& choices);

// The key table: every key, in the order --dry-run prints them.
const std::vector<Key>& keys();
const Key* find_key(const std::string& path);
bool is_section(const std::string& path);
std::vector<std::string> all_paths();  // keys and sections

// ---- values (values.cpp)
size_t edit_distance(const std::string& a, const std::string& b);
// Closest candidate within a distance that still looks like a typo, or "".
std::string closest(const std::string& word, const std::vector<std::string>& candidates);
std::string format_number(double v);
std::string format_float(float v);
std::string describe_range(const Range& r, bool integer);
bool in_range(double v, const Range& r);
std::string float_problem(double v, const Range& r);
bool parse_double(const std::string& s, double& out);
bool parse_int(const std::string& s, int64_t& out);
bool parse_bool(const std::string& s, bool& out);

// ---- the YAML reader (yaml_reader.cpp)
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

std::string describe_node(const YAML::Node& n);
void set_value(Config& cfg, const Key& key, const YAML::Node& node, const Reporter& rep);
void unknown_key(const std::string& path, const YAML::Mark& m, const Reporter& rep);
void apply_key(Config& cfg, const Key& key, const YAML::Node& value, const Reporter& rep, const std::string& origin);
// Applies a mapping of keys and sections below `prefix`.
void walk(Config& cfg, const YAML::Node& map, const std::string& prefix, const Reporter& rep);
// One YAML document (a second one is an error, not silently ignored).
YAML::Node parse_yaml(const std::string& text, const Reporter& rep, const std::string& key = "");
std::string read_file_or_fail(const std::string& path);

}  // namespace amp::config_detail
