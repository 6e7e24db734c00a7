// The YAML side of the loader: one document walked key by key against the key table, every
// value parsed into its field with errors naming FILE:LINE:COL (or the --set argument), repeated
// keys and second documents refused.
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/config_detail.h"
#include "core/files.h"

namespace amp::config_detail {

std::string describe_node(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Null: return "nothing";
    case YAML::NodeType::Scalar: return "\"" + n.Scalar() + "\"";
    default: return "an undefined value";
  }
}


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

// A record list (Key::record): a list of mappings whose fields are the key's, each checked like a
// key of its own, errors naming KEY[i].FIELD and its place.
std::vector<FaultSpec> read_records(const Key& key, const YAML::Node& node, const Reporter& rep) {
  const std::string shape = record_shape(key);
  if (!node.IsSequence()) rep.fail(node.Mark(), key.path, "expected a list of " + shape + ", got " + describe_node(node));
  std::vector<std::string> names;
  for (const RecordField& f : key.record) names.emplace_back(f.name);
  std::vector<FaultSpec> v;
  for (const auto& item : node) {
    const std::string ipath = std::string(key.path) + "[" + std::to_string(v.size()) + "]";
    if (!item.IsMap()) rep.fail(item.Mark(), ipath, "expected a mapping " + shape + ", got " + describe_node(item));
    check_unique_keys(item, ipath, rep);
    FaultSpec spec;
    std::vector<bool> seen(key.record.size(), false);
    // Every field's value, from the item or its default.
    auto set = [&](const RecordField& f, const YAML::Node* val, const std::string& fpath) {
      const std::string text = val ? (val->IsScalar() ? val->Scalar() : std::string()) : f.def;
      auto bad = [&](const std::string& what) {
        rep.fail(val->Mark(), fpath, "expected " + what + ", got " + describe_node(*val));
      };
      if (f.integer) {
        int64_t x = 0;
        if ((val && !val->IsScalar()) || !parse_int(text, x) || !in_range(double(x), f.range))
          bad(describe_range(f.range, true));
        spec.*f.integer = x;
      } else if (!f.choices.empty()) {
        if ((val && !val->IsScalar()) ||
            std::none_of(f.choices.begin(), f.choices.end(), [&](const char* c) { return text == c; }))
          bad(one_of(f.choices));
        spec.*f.text = text;
      } else {
        if (val && !val->IsScalar()) bad(f.what);
        spec.*f.text = text;
      }
    };
    for (const auto& kv : item) {
      const std::string k = kv.first.Scalar();
      const auto it = std::find(names.begin(), names.end(), k);
      if (it == names.end()) {
        const std::string near = closest(k, names);
        rep.fail(kv.first.Mark(), ipath + "." + k,
                 "unknown key" + (near.empty() ? std::string() : " (did you mean \"" + near + "\"?)"));
      }
      const size_t i = size_t(it - names.begin());
      set(key.record[i], &kv.second, ipath + "." + k);
      seen[i] = true;
    }
    for (size_t i = 0; i < key.record.size(); ++i) {
      if (seen[i]) continue;
      if (!key.record[i].def) rep.fail(item.Mark(), ipath, std::string("missing key \"") + key.record[i].name + "\"");
      set(key.record[i], nullptr, ipath);
    }
    v.push_back(spec);
  }
  return v;
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

  // One of the key's choices (with a typo suggestion); returns its index.
  auto choose = [&]() -> size_t {
    std::string list;
    std::vector<std::string> choices;
    for (const char* c : key.choices) {
      list += (list.empty() ? "" : ", ") + std::string(c);
      choices.emplace_back(c);
    }
    const std::string v = scalar("one of " + list);
    const auto it = std::find(choices.begin(), choices.end(), v);
    if (it == choices.end()) {
      const std::string near = closest(v, choices);
      rep.fail(mark, path,
               "expected one of " + list + ", got " + describe_node(node) +
                   (near.empty() ? "" : " (did you mean \"" + near + "\"?)"));
    }
    return size_t(it - choices.begin());
  };
  // A number within the key's range that the step can compute with (FP32-representable).
  auto number = [&]() -> double {
    const std::string what = describe_range(key.range, false);
    double v;
    if (!parse_double(scalar(what), v)) expect(what);
    if (const std::string why = float_problem(v, key.range); !why.empty())
      rep.fail(mark, path, "expected " + what + ", got " + describe_node(node) + ": " + why);
    if (!in_range(v, key.range)) expect(what);
    return v;
  };
  auto integer = [&]() -> int64_t {
    const std::string what = describe_range(key.range, true);
    int64_t v;
    if (!parse_int(scalar(what), v) || !in_range(double(v), key.range)) expect(what);
    return v;
  };

  if (auto* p = std::get_if<double*>(&ref)) {
    **p = number();
  } else if (auto* p = std::get_if<float*>(&ref)) {
    const double v = number();
    const float f = float(v);
    if (!in_range(double(f), key.range))  // e.g. 0.99999999999 rounds to 1 in FP32
      rep.fail(mark, path, "expected " + describe_range(key.range, false) + ", got " + describe_node(node) +
                               ": it rounds to " + format_number(double(f)) + " in FP32, outside that range");
    **p = f;
  } else if (auto* p = std::get_if<int64_t*>(&ref)) {
    **p = integer();
  } else if (auto* p = std::get_if<int32_t*>(&ref)) {
    **p = int32_t(integer());  // the key's range keeps it within int32
  } else if (auto* p = std::get_if<EnumRef>(&ref)) {
    p->set(choose());
  } else if (auto* p = std::get_if<bool*>(&ref)) {
    bool v;
    if (!parse_bool(scalar("true or false"), v)) expect("true or false");
    **p = v;
  } else if (auto* p = std::get_if<std::string*>(&ref)) {
    if (node.IsNull() && key.choices.empty()) **p = "";
    else if (!key.choices.empty()) **p = key.choices[choose()];
    else **p = scalar("a string");
    // A NUL would cut the string where the system reads it (a folder named up to the NUL).
    if ((*p)->find('\0') != std::string::npos) rep.fail(mark, path, "expected a string without NUL characters, got one with");
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
  } else if (auto* p = std::get_if<std::vector<std::string>*>(&ref)) {
    // Paths or glob patterns: each item a non-empty scalar (quote patterns that start with '*' or
    // hold '[', which YAML would read as an alias or a nested list).
    if (!node.IsSequence()) expect("a list of strings (paths or glob patterns, e.g. [\"data/*.txt\"])");
    std::vector<std::string> v;
    for (const auto& item : node) {
      const std::string ipath = path + "[" + std::to_string(v.size()) + "]";
      if (!item.IsScalar()) rep.fail(item.Mark(), ipath, "expected a string (a path or glob pattern), got " + describe_node(item));
      if (item.Scalar().empty()) rep.fail(item.Mark(), ipath, "expected a path or glob pattern, got an empty string");
      if (item.Scalar().find('\0') != std::string::npos)
        rep.fail(item.Mark(), ipath, "expected a path or glob pattern without NUL characters, got one with");
      v.push_back(item.Scalar());
    }
    **p = v;
  } else if (auto* p = std::get_if<std::vector<FaultSpec>*>(&ref)) {
    **p = read_records(key, node, rep);
  }
}

void unknown_key(const std::string& path, const YAML::Mark& m, const Reporter& rep) {
  // "<<: *anchor" is YAML 1.1's merge key, which YAML 1.2 (and this reader) does not have.
  if (path == "<<" || (path.size() > 3 && path.compare(path.size() - 3, 3, ".<<") == 0))
    rep.fail(m, path, "YAML merge keys (<<: *anchor) are not supported: write the keys out (an alias of a "
                      "whole value, key: *anchor, works)");
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
YAML::Node parse_yaml(const std::string& text, const Reporter& rep, const std::string& key) {
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
  // Not opened unless regular: opening a FIFO blocks until a writer comes, possibly forever. (A
  // missing file is the open's error below.)
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (std::filesystem::is_directory(st))
    throw Error(ErrorKind::Config, "config error: " + path + ": cannot read: is a directory, not a YAML file");
  if (std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    throw Error(ErrorKind::Config, "config error: " + path + ": cannot read: not a regular file (" + file_kind(st.type()) +
                                       "), not a YAML file");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(ErrorKind::Config, "config error: " + path + ": cannot open: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(ErrorKind::Config, "config error: " + path + ": cannot read: " + std::strerror(errno));
  std::string text = ss.str();
  // YAML has no NUL characters (yaml-cpp would read one as a line break).
  if (const size_t at = text.find('\0'); at != std::string::npos)
    throw Error(ErrorKind::Config, "config error: " + path + ":" +
                                       std::to_string(1 + std::count(text.begin(), text.begin() + std::ptrdiff_t(at), '\n')) +
                                       ": a NUL byte; a YAML file is text");
  return text;
}

}  // namespace amp::config_detail
