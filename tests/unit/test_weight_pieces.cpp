// Initial weights made or read a piece at a time (model/weight_pieces.h): a recipe's values
// against their value-by-value specification, weights files and checkpoints read in pieces against
// the masters written, and what is wrong with the values named as the pieces pass.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/gpt.h"
#include "model/param_layout.h"
#include "model/weight_pieces.h"
#include "model/weights_io.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/checkpoint_model.h"

using amp::ParamLayout;
using amp::TensorInit;
using amp::WeightPieces;

namespace {

// The piece sizes every reader is asked in: one value, odd sizes straddling tensors and padding,
// and everything at once.
std::vector<size_t> piece_sizes(size_t total) { return {1, 7, 31, 33, 1000, 4099, total}; }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A GPT-shaped layout and random masters for it (padding 0, as the readers give it).
amp::GptOptions small_gpt() {
  amp::GptOptions o;
  o.vocab = 61, o.seq_len = 9, o.n_layer = 2, o.n_head = 2, o.n_embd = 6;
  return o;
}
std::vector<float> random_masters(const ParamLayout& L, uint64_t seed) {
  std::vector<float> m(L.total, 0.0f);
  amp::Rng rng(seed);
  for (const amp::ParamInfo& t : L.tensors)
    for (size_t e = 0; e < t.span.count; ++e) m[t.span.offset + e] = float(rng.uniform(-2.0, 2.0));
  return m;
}

// Flips `bits` of a byte of ck's masters in its file at path, in place (found by their last 8 bytes).
void flip_bits_of_masters(const std::string& path, const amp::Checkpoint& ck, int bits) {
  const std::vector<char>& m = ck.sections.at("master");
  const std::string bytes = amp::read_file_bytes(path);
  const size_t at = bytes.find(std::string(m.end() - 8, m.end()));
  REQUIRE(at != std::string::npos);
  std::FILE* f = std::fopen(path.c_str(), "r+b");
  REQUIRE(f);
  std::fseek(f, long(at), SEEK_SET);
  std::fputc(bytes[at] ^ bits, f);
  std::fclose(f);
}

std::string error_reading(WeightPieces& w, size_t total, size_t piece) {
  return amp_test::error_of(amp::ErrorKind::Checkpoint, [&] { amp::read_all(w, total, piece); });
}

}  // namespace

TEST_CASE("initial weights: a recipe made a piece at a time gives its specification's values at any piece size",
          "[weights]") {
  // Odd sizes (padding between tensors), and a tensor past fill_normal's block of 65536 pairs.
  const ParamLayout L = amp::mlp_layout({301, 500, 7});
  const std::vector<TensorInit> recipe = {TensorInit::normal(0.02, 11), TensorInit::constant(0.5),
                                          TensorInit::uniform(-0.3, 0.7, 12), TensorInit::constant(1.0)};
  // The specification: value by value, each tensor's own stream, padding 0.
  std::vector<float> want(L.total, 0.0f);
  for (size_t i = 0; i < L.tensors.size(); ++i) {
    const TensorInit& how = recipe[i];
    amp::Rng rng(how.stream);
    for (size_t e = 0; e < L.tensors[i].span.count; ++e) {
      float& v = want[L.tensors[i].span.offset + e];
      if (how.kind == TensorInit::Kind::Constant) v = float(how.a);
      else if (how.kind == TensorInit::Kind::Normal) v = float(how.a * rng.normal());
      else v = float(rng.uniform(how.a, how.b));
    }
  }
  for (const size_t piece : piece_sizes(L.total)) {
    INFO("pieces of " << piece);
    amp::GeneratedWeights w(L, recipe);
    CHECK(same_bits(amp::read_all(w, L.total, piece), want));
  }
  amp::GeneratedWeights w(L, recipe);
  w.next(0, 5);
  CHECK_THROWS(w.next(6, 5));  // pieces come in order, none skipped
}

TEST_CASE("weights files: safetensors and llm.c read a piece at a time give the masters written", "[weights]") {
  const amp::GptOptions o = small_gpt();
  const ParamLayout L = amp::gpt_layout(o);
  const std::vector<float> master = random_masters(L, 5);
  amp_test::TempDir dir;
  for (const auto f : {amp::WeightFormat::Safetensors, amp::WeightFormat::Llmc}) {
    const std::string path = dir.file(f == amp::WeightFormat::Safetensors ? "w.safetensors" : "w.bin");
    amp::write_gpt_weights(path, f, o, L, master.data());
    for (const size_t piece : piece_sizes(L.total)) {
      INFO(path << ", pieces of " << piece);
      const auto w = amp::open_gpt_weights(path, o, L, "key");
      CHECK(same_bits(amp::read_all(*w, L.total, piece), master));
    }
  }
}

TEST_CASE("weights files: a value that is not finite is named as its piece is read, and a file cut after it is opened",
          "[weights]") {
  const amp::GptOptions o = small_gpt();
  const ParamLayout L = amp::gpt_layout(o);
  amp_test::TempDir dir;
  // In a tensor stored transposed (safetensors' Conv1D) and in one stored as ours (llm.c).
  const int tensor = L.index_of("h.1.mlp.fc.weight");
  std::vector<float> master = random_masters(L, 6);
  master[L.tensors[size_t(tensor)].span.offset + 13] = std::numeric_limits<float>::infinity();
  for (const auto f : {amp::WeightFormat::Safetensors, amp::WeightFormat::Llmc}) {
    const std::string path = dir.file(f == amp::WeightFormat::Safetensors ? "inf.safetensors" : "inf.bin");
    amp::write_gpt_weights(path, f, o, L, master.data());
    for (const size_t piece : {size_t(32), L.total}) {
      INFO(path << ", pieces of " << piece);
      const auto w = amp::open_gpt_weights(path, o, L, "model.init_from (test)");
      // The pieces before the tensor's come through.
      const size_t before = L.tensors[size_t(tensor)].span.offset / piece * piece;
      for (size_t b = 0; b < before; b += piece) CHECK_NOTHROW(w->next(b, piece));
      const std::string e = amp_test::error_of(amp::ErrorKind::Checkpoint, [&] { w->next(before, std::min(piece, L.total - before)); });
      CHECK_THAT(e, Catch::Contains("checkpoint error: model.init_from (test): " + path) &&
                        Catch::Contains("tensor \"h.1.mlp.c_fc.weight\" holds a value that is not finite (inf at element 13 of amp_ddp's layout)"));
    }
  }
  // A file cut short after it was opened (its header checked): the read names it truncated.
  const std::string path = dir.file("cut.bin");
  amp::write_gpt_weights(path, amp::WeightFormat::Llmc, o, L, random_masters(L, 7).data());
  const auto w = amp::open_gpt_weights(path, o, L, "key");
  REQUIRE(::truncate(path.c_str(), 2000) == 0);
  CHECK_THAT(error_reading(*w, L.total, 64), Catch::Contains("key: " + path + ": truncated: the file ended at byte 2000"));
}

TEST_CASE("checkpoint masters read a piece at a time: the masters saved, a value not finite named, an in-place change seen",
          "[weights][checkpoint]") {
  const ParamLayout L = amp::mlp_layout({13, 9, 3});
  std::vector<float> master = random_masters(L, 8);
  amp::Checkpoint ck;
  ck.header = {{"program", "amp_ddp"}, {"step", 4}};
  for (const amp::ParamInfo& t : L.tensors) ck.header["layout"].push_back({{"name", t.name}, {"rows", t.rows}, {"cols", t.cols}});
  const auto section = [](const std::vector<float>& v) {
    const char* p = reinterpret_cast<const char*>(v.data());
    return std::vector<char>(p, p + v.size() * sizeof(float));
  };
  ck.sections["master"] = section(master);
  ck.sections["state1"] = section(std::vector<float>(L.total, 0.25f));
  amp_test::TempDir dir;
  const std::string path = amp::save_checkpoint(dir.path(), ck, 4);
  for (const size_t piece : piece_sizes(L.total)) {
    INFO("pieces of " << piece);
    const amp::Checkpoint held = amp::load_checkpoint_header(path);
    CHECK(held.sections.count("master") == 0);  // left in the file
    CHECK(held.sections.count("state1") == 0);
    const auto w = amp::checkpoint_master_pieces(held, L);
    CHECK(same_bits(amp::read_all(*w, L.total, piece), master));
  }
  SECTION("another layout is refused before any value is read") {
    const amp::Checkpoint held = amp::load_checkpoint_header(path);
    CHECK_THAT(amp_test::error_of(amp::ErrorKind::Checkpoint, [&] { amp::checkpoint_master_pieces(held, amp::mlp_layout({13, 8, 3})); }),
               Catch::Contains("its tensor 0 is fc1.weight [9, 13], this model's fc1.weight [8, 13]"));
  }
  SECTION("a value that is not finite") {
    master[L.tensors[2].span.offset + 4] = std::nanf("");
    ck.sections["master"] = section(master);
    amp_test::TempDir other;
    const amp::Checkpoint held = amp::load_checkpoint_header(amp::save_checkpoint(other.path(), ck, 4));
    const auto w = amp::checkpoint_master_pieces(held, L);
    CHECK_THAT(error_reading(*w, L.total, 16), Catch::Contains("its master weights of fc2.weight hold a value that is not finite (nan at element 4)"));
  }
  SECTION("the file changed in place after it was verified") {
    const amp::Checkpoint held = amp::load_checkpoint_header(path);
    const auto w = amp::checkpoint_master_pieces(held, L);
    flip_bits_of_masters(path, ck, 0x40);  // after the file was verified
    CHECK_THAT(error_reading(*w, L.total, 16), Catch::Contains("changed while it was read: section \"master\""));
  }
}

TEST_CASE("export: a checkpoint's masters written a tensor at a time in each file's order read back as saved, and a change "
          "in place after the checkpoint was verified leaves no file",
          "[weights][checkpoint]") {
  const amp::GptOptions o = small_gpt();
  const ParamLayout L = amp::gpt_layout(o);
  const std::vector<float> master = random_masters(L, 9);
  amp::Checkpoint ck;
  ck.header = {{"program", "amp_ddp"}, {"step", 2}};
  for (const amp::ParamInfo& t : L.tensors) ck.header["layout"].push_back({{"name", t.name}, {"rows", t.rows}, {"cols", t.cols}});
  const char* p = reinterpret_cast<const char*>(master.data());
  ck.sections["master"] = std::vector<char>(p, p + master.size() * sizeof(float));
  amp_test::TempDir dir;
  const std::string path = amp::save_checkpoint(dir.path(), ck, 2);
  for (const auto f : {amp::WeightFormat::Safetensors, amp::WeightFormat::Llmc}) {
    const std::string out = dir.file(f == amp::WeightFormat::Safetensors ? "out.safetensors" : "out.bin");
    const amp::Checkpoint held = amp::load_checkpoint_header(path);
    amp::write_gpt_weights(out, f, o, L, *amp::checkpoint_master_tensors(held, L));
    const auto back = amp::open_gpt_weights(out, o, L, "key");
    CHECK(same_bits(amp::read_all(*back, L.total, 1000), master));
    // The same file as written from the masters in memory.
    const std::string whole = out + ".whole";
    amp::write_gpt_weights(whole, f, o, L, master.data());
    CHECK(amp::read_file_bytes(whole) == amp::read_file_bytes(out));
  }
  // A byte of the masters flipped after the checkpoint was verified: export names it and leaves
  // no file (nor its temporary).
  const amp::Checkpoint held = amp::load_checkpoint_header(path);
  flip_bits_of_masters(path, ck, 0x01);
  const std::string out = dir.file("changed.bin");
  CHECK_THAT(amp_test::error_of(amp::ErrorKind::Checkpoint,
                                [&] { amp::write_gpt_weights(out, amp::WeightFormat::Llmc, o, L, *amp::checkpoint_master_tensors(held, L)); }),
             Catch::Contains("changed while it was read: section \"master\""));
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) files += e.path().filename().string().rfind("changed.bin", 0) == 0;
  CHECK(files == 0);
}
