#include "train/checkpoint_model.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <utility>

#include "core/error.h"

namespace amp {

namespace {

[[noreturn]] void bad(const Checkpoint& ck, const std::string& context, const std::string& what) {
  throw Error(ErrorKind::Checkpoint, strcat("checkpoint error: ", context, ck.path, ": ", what));
}

}  // namespace

Config checkpoint_config(const Checkpoint& ck, const std::string& context) {
  const auto it = ck.header.find("config");
  if (it == ck.header.end() || !it->is_object())
    bad(ck, context, "its header records no config (written by an older amp_ddp): the model cannot be rebuilt from it");
  std::map<std::string, std::string> values;
  for (const auto& [k, v] : it->items())
    if (v.is_string()) values[k] = v.get<std::string>();
  return config_from_values(values, ck.path);
}

size_t checkpoint_rows(const Checkpoint& ck, const std::string& tensor) {
  const auto it = ck.header.find("layout");
  if (it == ck.header.end() || !it->is_array()) return 0;
  for (const auto& t : *it)
    if (t.is_object() && t.value("name", "") == tensor && t.contains("rows") && t["rows"].is_number_unsigned())
      return t["rows"].get<size_t>();
  return 0;
}

Checkpoint load_checkpoint_header(const std::string& path) {
  SectionStream weights;
  weights.names = {"master", "state1", "state2"};
  weights.visit = [](const std::string&, uint64_t, const char*, size_t) {};
  return load_checkpoint(path, weights);
}

namespace {

// ck's layout is L (tensor by tensor: names and shapes), its master section (left in the file)
// the size of L's masters.
void check_layout(const Checkpoint& ck, const ParamLayout& L, const std::string& context) {
  const auto layout = ck.header.find("layout");
  if (layout == ck.header.end() || !layout->is_array()) bad(ck, context, "its header has no layout");
  std::vector<std::string> theirs, ours;
  for (const auto& t : *layout)
    theirs.push_back(t.is_object() ? strcat(t.value("name", "?"), " [", t.value("rows", size_t(0)), ", ",
                                            t.value("cols", size_t(0)), "]")
                                   : std::string("?"));
  for (const ParamInfo& t : L.tensors) ours.push_back(strcat(t.name, " [", t.rows, ", ", t.cols, "]"));
  for (size_t i = 0; i < std::max(theirs.size(), ours.size()); ++i)
    if (i >= theirs.size() || i >= ours.size() || theirs[i] != ours[i])
      bad(ck, context, strcat("its tensor ", i, " is ", i < theirs.size() ? theirs[i] : "missing", ", this model's ",
                              i < ours.size() ? ours[i] : "missing",
                              " (another model: check model.* against the run that wrote it)"));
  const auto master = ck.in_file.find("master");
  if (master == ck.in_file.end() || master->second.bytes != L.total * sizeof(float))
    bad(ck, context, strcat("its master section does not hold the model's ", L.total, " FP32 weights"));
}

// The first value of values [begin, begin + count) that is not finite, as an error.
void check_finite(const Checkpoint& ck, const ParamLayout& L, const float* values, size_t begin, size_t count,
                  const std::string& context) {
  if (const ParamLayout::NonFinite bad_value = L.first_non_finite(values, begin, count); bad_value.tensor >= 0)
    bad(ck, context, strcat("its master weights of ", L.tensors[size_t(bad_value.tensor)].name, " hold a value that is not finite (",
                            bad_value.value, " at element ", bad_value.element, ")"));
}

class SectionPieces : public WeightPieces {
 public:
  SectionPieces(const Checkpoint& ck, std::string name, PieceCheck check)
      : ck_(ck), name_(std::move(name)), check_(std::move(check)) {}
  const float* next(size_t begin, size_t count) override {
    AMP_CHECK(begin == end_, "checkpoint section \"", name_, "\": piece at ", begin, " asked after ", end_);
    end_ = begin + count;
    piece_.resize(count);
    reader().read(piece_.data(), count * sizeof(float));
    if (check_) check_(begin, piece_.data(), count);
    return piece_.data();
  }
  void finish() override { reader().finish(); }

 private:
  SectionReader& reader() {  // opened at the first piece: an error there is that piece's
    if (!in_) in_.emplace(ck_, name_);
    return *in_;
  }
  const Checkpoint& ck_;
  std::string name_;
  PieceCheck check_;
  std::optional<SectionReader> in_;
  size_t end_ = 0;
  std::vector<float> piece_;
};

class MasterTensors : public TensorSource {
 public:
  MasterTensors(const Checkpoint& ck, const ParamLayout& L, std::string context)
      : ck_(ck), layout_(L), context_(std::move(context)) {
    const auto it = ck.in_file.find("master");
    AMP_CHECK(it != ck.in_file.end() && ck.file, "checkpoint_master_tensors: the masters of ", ck.path, " are not left in the file");
    offset_ = it->second.offset;
  }
  void read(size_t tensor, float* out) override {
    const TensorSpan& s = layout_.tensors[tensor].span;
    ck_.file->read(offset_ + s.offset * sizeof(float), out, s.count * sizeof(float));
    check_finite(ck_, layout_, out, s.offset, s.count, context_);
  }
  void finish() override {
    SectionReader in(ck_, "master");
    std::vector<float> piece(std::min(layout_.total, size_t(16) << 20));
    for (size_t b = 0; b < layout_.total; b += piece.size())
      in.read(piece.data(), std::min(piece.size(), layout_.total - b) * sizeof(float));
    in.finish();
  }

 private:
  const Checkpoint& ck_;
  const ParamLayout& layout_;
  std::string context_;
  uint64_t offset_ = 0;
};

}  // namespace

std::unique_ptr<WeightPieces> checkpoint_section_pieces(const Checkpoint& ck, const std::string& name, PieceCheck check) {
  return std::make_unique<SectionPieces>(ck, name, std::move(check));
}

std::unique_ptr<WeightPieces> checkpoint_master_pieces(const Checkpoint& ck, const ParamLayout& L, const std::string& context) {
  check_layout(ck, L, context);
  return checkpoint_section_pieces(ck, "master", [&ck, &L, context](size_t begin, const float* v, size_t count) {
    check_finite(ck, L, v, begin, count, context);
  });
}

std::unique_ptr<TensorSource> checkpoint_master_tensors(const Checkpoint& ck, const ParamLayout& L, const std::string& context) {
  check_layout(ck, L, context);
  return std::make_unique<MasterTensors>(ck, L, context);
}

std::vector<float> checkpoint_fp8_scales(const Checkpoint& ck, const std::vector<Fp8Tensor>& tensors, std::string* why,
                                         const std::string& context) {
  const auto fh = ck.header.find("fp8");
  if (fh == ck.header.end() || !fh->is_object()) {
    *why = "has no FP8 state (written without precision.compute fp8)";
    return {};
  }
  std::vector<std::string> names;
  for (const Fp8Tensor& t : tensors) names.push_back(t.name);
  if (!fh->contains("tensors") || (*fh)["tensors"] != nlohmann::json(names)) {
    *why = "has other FP8 tensors than this model's";
    return {};
  }
  const auto sec = ck.sections.find("fp8_scales");
  if (sec == ck.sections.end() || sec->second.size() != names.size() * sizeof(float))
    bad(ck, context, strcat("its fp8_scales section does not hold the scales of its ", names.size(), " FP8 tensors"));
  std::vector<float> scales(names.size());
  std::memcpy(scales.data(), sec->second.data(), sec->second.size());
  for (size_t t = 0; t < names.size(); ++t)
    if (!(scales[t] > 0.0f) || pow2_floor(scales[t]) != scales[t])
      bad(ck, context, strcat("the FP8 scale of ", names[t], " is ", scales[t], ", not a power of two in [2^-126, 2^126]"));
  return scales;
}

}  // namespace amp
