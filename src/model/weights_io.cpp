#include "model/weights_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "core/convert.h"
#include "core/error.h"
#include "core/files.h"
#include "core/format.h"

namespace amp {

namespace {

constexpr int32_t kLlmcMagic = 20240326;
constexpr size_t kLlmcHeaderInts = 256;
// llm.c pads the vocabulary to a multiple of 128 (50257 -> 50304).
size_t llmc_padded_vocab(size_t v) { return (v + 127) / 128 * 128; }

// Our tensor name -> Hugging Face's, and whether HF stores the weight transposed (Conv1D: [in, out]).
struct HfName {
  std::string name;
  bool transpose = false;
};
HfName hf_name(const std::string& ours) {
  static const std::pair<const char*, const char*> kRenames[] = {
      {".attn.qkv.", ".attn.c_attn."}, {".attn.proj.", ".attn.c_proj."}, {".mlp.fc.", ".mlp.c_fc."}, {".mlp.proj.", ".mlp.c_proj."}};
  for (const auto& [from, to] : kRenames) {
    const size_t at = ours.find(from);
    if (at == std::string::npos) continue;
    const std::string name = ours.substr(0, at) + to + ours.substr(at + std::strlen(from));
    return {name, name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0};
  }
  return {ours, false};
}

// llm.c's tensor order: tensor indices of L in the order llm.c stores them.
std::vector<int> llmc_order(const ParamLayout& L, size_t n_layer) {
  std::vector<int> order = {L.index_of("wte.weight"), L.index_of("wpe.weight")};
  static const char* const kKinds[] = {"ln_1.weight", "ln_1.bias", "attn.qkv.weight", "attn.qkv.bias",
                                       "attn.proj.weight", "attn.proj.bias", "ln_2.weight", "ln_2.bias",
                                       "mlp.fc.weight", "mlp.fc.bias", "mlp.proj.weight", "mlp.proj.bias"};
  for (const char* kind : kKinds)
    for (size_t l = 0; l < n_layer; ++l) order.push_back(L.index_of(strcat("h.", l, ".", kind)));
  order.push_back(L.index_of("ln_f.weight"));
  order.push_back(L.index_of("ln_f.bias"));
  for (int i : order) AMP_CHECK(i >= 0, "llm.c order: a GPT tensor is missing from the layout");
  AMP_CHECK(order.size() == L.tensors.size(), "llm.c order: ", order.size(), " tensors for a layout of ", L.tensors.size());
  return order;
}

// The cols x rows transpose of a rows x cols matrix: a tensor of ours as HF stores it when it
// transposes it, and back (with rows and cols swapped).
std::vector<float> transposed(const float* m, size_t rows, size_t cols) {
  std::vector<float> v(rows * cols);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) v[c * rows + r] = m[r * cols + c];
  return v;
}

// A tensor's shape as Hugging Face stores it: biases and gains 1-D, Conv1D weights [in, out].
std::vector<int64_t> hf_shape(const ParamInfo& t, bool transpose) {
  if (!t.decay) return {int64_t(t.cols)};
  return transpose ? std::vector<int64_t>{int64_t(t.cols), int64_t(t.rows)}
                   : std::vector<int64_t>{int64_t(t.rows), int64_t(t.cols)};
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

// Writes bytes to path through a temporary in the same folder; path must not exist, and nothing is
// ever overwritten: the temporary is created new (O_EXCL, not through a symbolic link), and it is
// published with link(), which fails if path appeared meanwhile (rename() would replace it). Where
// the file system has no hard links, rename() after a last check (a window of microseconds).
void write_new_file(const std::string& path, const std::function<void(const ByteSink&)>& produce) {
  const auto fail = [&](const std::string& what) {
    throw Error(ErrorKind::Output, strcat("output error: ", path.empty() ? "\"\"" : path, ": ", what));
  };
  if (path.empty()) fail("is empty: name the file to write");
  const auto exists = [&] {
    std::error_code ec;
    return std::filesystem::exists(std::filesystem::symlink_status(path, ec));
  };
  const std::string exists_text = "exists; choose another name (nothing is overwritten)";
  if (exists()) fail(exists_text);
  if (path.back() == '/') fail("names a folder; give a file name");
  {
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!parent.empty() && !std::filesystem::is_directory(parent, ec))
      fail(strcat("its folder ", parent.string(), std::filesystem::exists(parent, ec) ? " is not a folder" : " does not exist"));
  }
  const std::string tmp = strcat(path, ".tmp.", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) fail(strcat("cannot create ", tmp, ": ", std::strerror(errno)));
  const ByteSink sink = [&](const void* data, size_t bytes) {
    const char* p = static_cast<const char*>(data);
    for (size_t done = 0; done < bytes;) {
      const ssize_t n = ::write(fd, p + done, bytes - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail(strcat("write failed: ", std::strerror(n < 0 ? errno : EIO)));
      done += size_t(n);
    }
  };
  try {
    produce(sink);  // a failed write, or the source's own error (a value not finite, a failed read)
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(strcat("write failed: ", std::strerror(err)));
  }
  if (::link(tmp.c_str(), path.c_str()) == 0) {
    ::unlink(tmp.c_str());
    return;
  }
  const int err = errno;
  const bool no_links = err == EPERM || err == EOPNOTSUPP || err == ENOSYS || err == EXDEV;
  if (!no_links || exists()) {
    ::unlink(tmp.c_str());
    fail(err == EEXIST || exists() ? exists_text : strcat("cannot put the finished file in place: ", std::strerror(err)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rerr = errno;
    ::unlink(tmp.c_str());
    fail(strcat("cannot put the finished file in place: ", std::strerror(rerr)));
  }
}

void write_safetensors(const ByteSink& sink, const ParamLayout& L, TensorSource& src) {
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}, {"producer", "amp_ddp"}}}};
  size_t at = 0;
  for (const ParamInfo& t : L.tensors) {
    const HfName hf = hf_name(t.name);
    const size_t bytes = t.rows * t.cols * 4;
    header[hf.name] = {{"dtype", "F32"}, {"shape", hf_shape(t, hf.transpose)}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';  // the data starts 8-byte aligned
  const uint64_t n = h.size();
  sink(&n, 8);
  sink(h.data(), h.size());
  std::vector<float> v;
  for (size_t i = 0; i < L.tensors.size(); ++i) {
    const ParamInfo& t = L.tensors[i];
    v.resize(t.rows * t.cols);
    src.read(i, v.data());
    if (hf_name(t.name).transpose) v = transposed(v.data(), t.rows, t.cols);
    sink(v.data(), v.size() * 4);
  }
}

void write_llmc(const ByteSink& sink, const GptOptions& o, const ParamLayout& L, TensorSource& src) {
  const size_t vp = llmc_padded_vocab(o.vocab);
  int32_t header[kLlmcHeaderInts] = {};
  header[0] = kLlmcMagic, header[1] = 3, header[2] = int32_t(o.seq_len), header[3] = int32_t(o.vocab);
  header[4] = int32_t(o.n_layer), header[5] = int32_t(o.n_head), header[6] = int32_t(o.n_embd), header[7] = int32_t(vp);
  sink(header, sizeof header);
  std::vector<float> v;
  for (int i : llmc_order(L, o.n_layer)) {
    const ParamInfo& t = L.tensors[size_t(i)];
    v.resize(t.rows * t.cols);
    src.read(size_t(i), v.data());
    sink(v.data(), v.size() * 4);
    if (t.name == "wte.weight") {  // zero padding rows
      v.assign((vp - o.vocab) * o.n_embd, 0.0f);
      sink(v.data(), v.size() * 4);
    }
  }
}

// Tensors from the flat masters in memory.
class HostTensors : public TensorSource {
 public:
  HostTensors(const ParamLayout& L, const float* master) : layout_(L), master_(master) {}
  void read(size_t tensor, float* out) override {
    const TensorSpan& s = layout_.tensors[tensor].span;
    std::copy_n(master_ + s.offset, s.count, out);
  }

 private:
  const ParamLayout& layout_;
  const float* master_;
};

const char* const kUntied = " (this GPT's LM head is tied to the token embedding: an untied head cannot be loaded)";

[[noreturn]] void bad_file(const std::string& key, const std::string& path, const std::string& what) {
  throw Error(ErrorKind::Checkpoint, strcat("checkpoint error: ", key, ": ", path, ": ", what));
}

// A tensor's place in a weights file: its values start at byte `offset`, of type dt, stored as
// ours or transposed (HF's Conv1D weights).
struct Stored {
  uint64_t offset = 0;
  DType dt = DType::F32;
  bool transpose = false;
};

// Where each tensor of L lies in the file, and the LM head a safetensors file may carry (tied to
// wte: checked against it as it is read).
struct StoredLayout {
  std::vector<Stored> tensors;
  std::optional<Stored> lm_head;
  std::string lm_head_name;
};

// The format's rule for the data bytes: the tensors' data_offsets cover them exactly, with no hole
// and no overlap, so that no bytes ride along unread and no two tensors share bytes.
void check_data_coverage(const nlohmann::json& header, size_t data_size, const std::string& path, const std::string& key) {
  std::vector<std::pair<std::pair<size_t, size_t>, std::string>> spans;  // ([begin, end), tensor)
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const auto off = info.is_object() ? info.find("data_offsets") : info.end();
    if (!info.is_object() || off == info.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned() || (*off)[1].get<size_t>() < (*off)[0].get<size_t>())
      bad_file(key, path, strcat("tensor \"", printable(name), "\": its header entry lacks data_offsets [begin, end]"));
    spans.push_back({{(*off)[0].get<size_t>(), (*off)[1].get<size_t>()}, name});
  }
  std::sort(spans.begin(), spans.end());
  size_t end = 0;
  std::string last;
  for (const auto& [span, name] : spans) {
    if (span.first < end)
      bad_file(key, path, strcat("tensor \"", printable(name), "\": its data_offsets [", span.first, ", ", span.second,
                                 "] overlap those of tensor \"", printable(last), "\", which end at ", end));
    if (span.first > end)
      bad_file(key, path, strcat("data bytes [", end, ", ", span.first, ") belong to no tensor's data_offsets (the format allows no holes)"));
    end = span.second, last = name;
  }
  if (end != data_size)
    bad_file(key, path, end > data_size ? strcat("tensor \"", printable(last), "\": its data_offsets end at ", end, ", past the ", data_size,
                                                 " data bytes of the file (truncated?)")
                                        : strcat(data_size - end, " bytes after the last tensor's data_offsets belong to no tensor"));
}

StoredLayout index_safetensors(const ReadFile& file, const std::string& path, const std::string& key, const ParamLayout& L) {
  uint64_t n = 0;
  file.read(0, &n, 8);
  if (n < 2 || n > file.size() - 8) bad_file(key, path, strcat("safetensors header of ", n, " bytes in a file of ", file.size()));
  std::vector<char> text(static_cast<size_t>(n));
  file.read(8, text.data(), text.size());
  if (const void* nul = std::memchr(text.data(), 0, text.size()))
    bad_file(key, path, strcat("the safetensors header holds a NUL byte at byte ", 8 + (static_cast<const char*>(nul) - text.data()),
                               " of the file (the format pads its header with spaces)"));
  nlohmann::json header;
  // A key twice in one object: the parser would keep the last silently (one tensor's entry lost).
  std::vector<std::set<std::string>> keys_seen;  // one set per open object
  std::string repeated;
  const nlohmann::json::parser_callback_t on_key = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) keys_seen.emplace_back();
    if (event == E::object_end) keys_seen.pop_back();
    if (event == E::key && !keys_seen.back().insert(parsed.get<std::string>()).second && repeated.empty())
      repeated = parsed.get<std::string>();
    return true;
  };
  try {
    header = nlohmann::json::parse(text.begin(), text.end(), on_key);
  } catch (const nlohmann::json::exception& e) {
    bad_file(key, path, strcat("the safetensors header is not valid JSON: ", printable(e.what(), 400)));
  }
  if (!repeated.empty())
    bad_file(key, path, strcat("the safetensors header names \"", printable(repeated), "\" twice in one object (a JSON reader would keep one silently)"));
  if (!header.is_object()) bad_file(key, path, "the safetensors header is not a JSON object");
  std::vector<char>().swap(text);
  const uint64_t data_begin = 8 + n, data_size = file.size() - data_begin;
  check_data_coverage(header, data_size, path, key);
  // Our names by HF name; the "transformer." prefix of GPT2LMHeadModel files is accepted.
  std::map<std::string, int> wanted;
  for (size_t i = 0; i < L.tensors.size(); ++i) wanted[hf_name(L.tensors[i].name).name] = int(i);
  StoredLayout out;
  out.tensors.resize(L.tensors.size());
  std::vector<std::string> seen_as(L.tensors.size());  // the file's name of each tensor found
  const nlohmann::json* lm_head = nullptr;
  // A header entry's shape (-1 for a size that is not an integer).
  const auto shape_of = [](const nlohmann::json& info) {
    std::vector<int64_t> shape;
    for (const auto& d : info["shape"]) shape.push_back(d.is_number_integer() ? d.get<int64_t>() : -1);
    return shape;
  };
  // Where a tensor's values lie, once its header entry is checked: its dtype, its shape against
  // want (note: what to change when they differ), its data_offsets against the data's extent.
  const auto place = [&](const std::string& raw_name, const nlohmann::json& info, const std::vector<int64_t>& want,
                         const std::string& note, bool transpose) {
    const std::string tensor = strcat("tensor \"", printable(raw_name), "\"");
    if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") || !info.contains("data_offsets"))
      bad_file(key, path, tensor + ": its header entry lacks dtype, shape or data_offsets");
    const std::string dtype = info["dtype"].is_string() ? info["dtype"].get<std::string>() : "?";
    const DType dt = dtype == "F32" ? DType::F32 : dtype == "F16" ? DType::F16 : dtype == "BF16" ? DType::BF16 : DType::U8;
    if (dt == DType::U8) bad_file(key, path, strcat(tensor, " is ", printable(dtype), "; F32, F16 or BF16 is read"));
    if (!info["shape"].is_array()) bad_file(key, path, strcat(tensor, ": its shape is not a list of sizes: ", printable(info["shape"].dump(), 80)));
    const std::vector<int64_t> shape = shape_of(info);
    if (shape != want)
      bad_file(key, path, strcat(tensor, " has shape ", shape_text(shape), ", this model's is ", shape_text(want), note));
    // check_data_coverage has checked data_offsets: [begin, end] inside the data bytes.
    const auto& off = info["data_offsets"];
    size_t count = 1;
    for (const int64_t d : want) count *= size_t(d);
    if (off[1].get<size_t>() - off[0].get<size_t>() != count * dtype_size(dt))
      bad_file(key, path, strcat(tensor, ": data_offsets ", off.dump(), " do not hold ", count, " ", dtype,
                                 " values inside the ", data_size, " data bytes"));
    return Stored{data_begin + off[0].get<uint64_t>(), dt, transpose};
  };
  for (const auto& [raw_name, info] : header.items()) {
    if (raw_name == "__metadata__") continue;
    std::string name = raw_name.rfind("transformer.", 0) == 0 ? raw_name.substr(12) : raw_name;
    // The causal-mask buffers some exports carry, and the LM head tied to wte.
    if (name.size() > 10 && (name.compare(name.size() - 10, 10, ".attn.bias") == 0 ||
                             (name.size() > 17 && name.compare(name.size() - 17, 17, ".attn.masked_bias") == 0))) {
      // Not read, but of a layer this GPT has (h.N's own ln_1): else the file is another model's.
      if (!wanted.count(name.substr(0, name.rfind(".attn.")) + ".ln_1.weight"))
        bad_file(key, path, strcat("tensor \"", printable(raw_name), "\" is the causal-mask buffer of a layer this GPT does ",
                                   "not have (a model with more layers than model.n_layer, or another architecture)"));
      // And shaped as GPT-2's: attn.bias the [1, 1, T, T] mask of the context (wpe's rows),
      // attn.masked_bias a scalar; a number type the format has. check_data_coverage has checked
      // its data_offsets.
      const bool mask = name.compare(name.size() - 10, 10, ".attn.bias") == 0;
      const int64_t T = int64_t(L.tensors[size_t(L.index_of("wpe.weight"))].rows);
      const std::vector<int64_t> want = mask ? std::vector<int64_t>{1, 1, T, T} : std::vector<int64_t>{};
      const std::string tensor = strcat("tensor \"", printable(raw_name), "\" (a causal-mask buffer)");
      if (!info.is_object() || !info.contains("dtype") || !info["dtype"].is_string() || !info.contains("shape") ||
          !info["shape"].is_array())
        bad_file(key, path, tensor + ": its header entry lacks a dtype or a shape list");
      static const std::map<std::string, size_t> kTypeBytes = {{"BOOL", 1}, {"U8", 1}, {"I8", 1},  {"F16", 2}, {"BF16", 2},
                                                               {"F32", 4},  {"I32", 4}, {"F64", 8}, {"I64", 8}};
      const auto type = kTypeBytes.find(info["dtype"].get<std::string>());
      if (type == kTypeBytes.end())
        bad_file(key, path, strcat(tensor, " is ", printable(info["dtype"].get<std::string>()), "; a mask is BOOL or a number type"));
      const std::vector<int64_t> shape = shape_of(info);
      if (shape != want)
        bad_file(key, path, strcat(tensor, " has shape ", shape_text(shape), "; this model's is ", shape_text(want),
                                   mask ? " (1 x 1 x context x context: model.seq_len)" : " (a scalar)"));
      size_t count = 1;
      for (const int64_t d : want) count *= size_t(d);
      const auto& off = info["data_offsets"];
      if (off[1].get<size_t>() - off[0].get<size_t>() != count * type->second)
        bad_file(key, path, strcat(tensor, ": data_offsets ", off.dump(), " do not hold ", count, " ", type->first, " values"));
      continue;
    }
    if (name == "lm_head.weight") {  // tied to wte in GPT-2 (checked below against wte)
      lm_head = &info, out.lm_head_name = raw_name;
      continue;
    }
    const auto it = wanted.find(name);
    if (it == wanted.end())
      bad_file(key, path, strcat("tensor \"", printable(raw_name), "\" is not a tensor of this GPT (a model with more layers ",
                                 "than model.n_layer, or another architecture)"));
    const ParamInfo& t = L.tensors[size_t(it->second)];
    const HfName hf = hf_name(t.name);
    if (!seen_as[size_t(it->second)].empty())
      bad_file(key, path, strcat("tensor \"", hf.name, "\" is in the file twice, as \"", printable(seen_as[size_t(it->second)]),
                                 "\" and as \"", printable(raw_name), "\""));
    out.tensors[size_t(it->second)] = place(raw_name, info, hf_shape(t, hf.transpose),
                                            t.name == "wte.weight"   ? " (vocabulary x n_embd: model.vocab_size)"
                                            : t.name == "wpe.weight" ? " (context x n_embd: model.seq_len)"
                                                                     : "",
                                            hf.transpose);
    seen_as[size_t(it->second)] = raw_name;
  }
  for (size_t i = 0; i < L.tensors.size(); ++i)
    if (seen_as[i].empty()) bad_file(key, path, strcat("tensor \"", hf_name(L.tensors[i].name).name, "\" of this model is missing"));
  // This GPT's LM head is wte itself: a file's lm_head.weight is read only to check that it is.
  if (lm_head) {
    const ParamInfo& wte = L.tensors[size_t(L.index_of("wte.weight"))];
    out.lm_head = place(out.lm_head_name, *lm_head, {int64_t(wte.rows), int64_t(wte.cols)}, kUntied, false);
  }
  return out;
}

StoredLayout index_llmc(const ReadFile& file, const std::string& path, const std::string& key, const GptOptions& o,
                       const ParamLayout& L) {
  if (file.size() < kLlmcHeaderInts * 4) bad_file(key, path, "truncated: shorter than llm.c's 1024-byte header");
  int32_t h[kLlmcHeaderInts];
  file.read(0, h, sizeof h);
  const int32_t version = h[1];
  if (version != 1 && version != 3 && version != 5)
    bad_file(key, path, strcat("llm.c model version ", version, " (versions 1 and 3, FP32, and 5, BF16, are read)"));
  const size_t vp = version == 1 ? size_t(h[3]) : size_t(std::max(h[7], 0));
  auto expect = [&](const char* what, int64_t got, size_t want, const char* k) {
    if (got != int64_t(want)) bad_file(key, path, strcat("its ", what, " is ", got, ", this model's ", want, " (", k, ")"));
  };
  expect("context length", h[2], o.seq_len, "model.seq_len");
  expect("vocabulary", h[3], o.vocab, "model.vocab_size");
  expect("layer count", h[4], o.n_layer, "model.n_layer");
  expect("head count", h[5], o.n_head, "model.n_head");
  expect("width", h[6], o.n_embd, "model.n_embd");
  if (vp < o.vocab) bad_file(key, path, strcat("its padded vocabulary ", vp, " is below its vocabulary ", o.vocab));
  const DType dt = version == 5 ? DType::BF16 : DType::F32;
  const size_t es = dtype_size(dt);
  size_t need = kLlmcHeaderInts * 4;
  for (const ParamInfo& t : L.tensors) need += (t.name == "wte.weight" ? vp * t.cols : t.rows * t.cols) * es;
  if (file.size() != need)
    bad_file(key, path, strcat("it has ", file.size(), " bytes; the header's model needs ", need));
  StoredLayout out;
  out.tensors.resize(L.tensors.size());
  uint64_t at = kLlmcHeaderInts * 4;
  for (int i : llmc_order(L, o.n_layer)) {
    const ParamInfo& t = L.tensors[size_t(i)];
    out.tensors[size_t(i)] = Stored{at, dt, false};
    at += (t.name == "wte.weight" ? vp * t.cols : t.rows * t.cols) * es;
  }
  return out;
}

// The weights of a file indexed as `stored`, read a piece at a time in L's order. Holds a piece
// (its values and their bytes) and, for a transposed tensor, that tensor whole.
class FileWeights : public WeightPieces {
 public:
  FileWeights(std::unique_ptr<ReadFile> file, StoredLayout stored, const ParamLayout& L, std::string key, std::string path)
      : file_(std::move(file)), stored_(std::move(stored)), layout_(L), key_(std::move(key)), path_(std::move(path)),
        wte_(L.index_of("wte.weight")) {}

  const float* next(size_t begin, size_t count) override {
    AMP_CHECK(begin == end_ && begin + count <= layout_.total, "weights file: piece [", begin, ", ", begin + count,
              ") asked after ", end_, " of ", layout_.total);
    end_ = begin + count;
    piece_.assign(count, 0.0f);
    for (const ParamLayout::Slice& s : layout_.slices(begin, count)) {
      const Stored& where = stored_.tensors[s.tensor];
      float* out = piece_.data() + s.at;
      if (where.transpose) {
        std::copy_n(untransposed(s.tensor) + s.first, s.count, out);
      } else {
        read_values(where, s.first, s.count, out);
      }
      if (int(s.tensor) == wte_ && stored_.lm_head) check_head(s, out);
    }
    if (const ParamLayout::NonFinite bad = layout_.first_non_finite(piece_.data(), begin, count); bad.tensor >= 0)
      bad_file(key_, path_, strcat("tensor \"", hf_name(layout_.tensors[size_t(bad.tensor)].name).name,
                                   "\" holds a value that is not finite (", bad.value, " at element ", bad.element,
                                   " of amp_ddp's layout)"));
    return piece_.data();
  }

 private:
  // count values from element `first` of a tensor stored as ours, as FP32.
  void read_values(const Stored& where, size_t first, size_t count, float* out) {
    const size_t es = dtype_size(where.dt);
    if (where.dt == DType::F32) {
      file_->read(where.offset + first * es, out, count * es);
      return;
    }
    bytes_.resize(count * es);
    file_->read(where.offset + first * es, bytes_.data(), bytes_.size());
    convert(bytes_.data(), where.dt, out, DType::F32, count);
  }
  // Tensor t, stored transposed, in our order (read once, kept until another is asked for).
  const float* untransposed(size_t t) {
    if (cached_ != t) {
      const ParamInfo& info = layout_.tensors[t];
      std::vector<float> stored(info.rows * info.cols);
      read_values(stored_.tensors[t], 0, stored.size(), stored.data());
      cache_ = transposed(stored.data(), info.cols, info.rows);
      cached_ = t;
    }
    return cache_.data();
  }
  // The file's LM head over wte's elements of slice s (out: wte's values): the same bits.
  void check_head(const ParamLayout::Slice& s, const float* out) {
    head_.resize(s.count);
    read_values(*stored_.lm_head, s.first, s.count, head_.data());
    for (size_t e = 0; e < s.count; ++e)
      if (std::memcmp(&head_[e], &out[e], 4) != 0)
        bad_file(key_, path_, strcat("tensor \"", stored_.lm_head_name, "\" differs from the token embedding (element ",
                                     s.first + e, ": ", head_[e], " against ", out[e], ")", kUntied));
  }

  std::unique_ptr<ReadFile> file_;
  StoredLayout stored_;
  const ParamLayout& layout_;
  std::string key_, path_;
  int wte_;
  size_t end_ = 0, cached_ = SIZE_MAX;
  std::vector<float> piece_, cache_, head_;
  std::vector<char> bytes_;
};

}  // namespace

void write_gpt_weights(const std::string& path, WeightFormat f, const GptOptions& o, const ParamLayout& L,
                       const float* master) {
  HostTensors src(L, master);
  write_gpt_weights(path, f, o, L, src);
}

void write_gpt_weights(const std::string& path, WeightFormat f, const GptOptions& o, const ParamLayout& L,
                       TensorSource& src) {
  write_new_file(path, [&](const ByteSink& sink) {
    if (f == WeightFormat::Safetensors) write_safetensors(sink, L, src);
    else write_llmc(sink, o, L, src);
    src.finish();  // before the file is put in place
  });
}

bool looks_like_gpt_weights(const std::string& path) {
  // Not opened unless regular: opening a FIFO blocks until a writer comes (the checkpoint reader
  // then names what the path is).
  if (!regular_file_problem(path).empty()) return false;
  std::ifstream in(path, std::ios::binary);
  char b[9] = {};
  in.read(b, 9);
  if (in.gcount() < 9) return false;
  int32_t magic = 0;
  std::memcpy(&magic, b, 4);
  return magic == kLlmcMagic || b[8] == '{';
}

std::unique_ptr<WeightPieces> open_gpt_weights(const std::string& path, const GptOptions& o, const ParamLayout& L,
                                               const std::string& key) {
  auto file = std::make_unique<ReadFile>(path, ErrorKind::Checkpoint, strcat("checkpoint error: ", key, ": ", path, ": "));
  char first[9] = {};
  if (file->size() >= 9) file->read(0, first, 9);
  int32_t magic = 0;
  std::memcpy(&magic, first, 4);
  StoredLayout stored;
  if (magic == kLlmcMagic) stored = index_llmc(*file, path, key, o, L);
  else if (file->size() >= 9 && first[8] == '{') stored = index_safetensors(*file, path, key, L);
  else bad_file(key, path, "neither a safetensors file nor an llm.c model file (nor an amp_ddp checkpoint)");
  return std::make_unique<FileWeights>(std::move(file), std::move(stored), L, key, path);
}

}  // namespace amp
