// Language-model data: text files as bytes, llm.c token shards (a valid shard and every corrupted
// field), paths and globs, windows and the train/eval split, load_datasets for data.format text and
// tokens, the digest, and the fortunes corpus of configs/gpt_fortunes_fp16.yaml.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/load.h"
#include "data/sampler.h"
#include "data/tokenizer.h"
#include "test_util.h"

using namespace amp;
using amp_test::TempDir;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

// The message of the Data error that f throws, or a text that no expected message contains.
std::string data_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::Data && e.exit_code() == 3) return e.what();
    return std::string("<wrong error kind> ") + e.what();
  } catch (const std::exception& e) {
    return std::string("<not an amp::Error> ") + e.what();
  }
  return "<no exception>";
}

void put_le32(std::string& b, int32_t v) {
  const uint32_t u = uint32_t(v);
  for (int i = 0; i < 4; ++i) b.push_back(char((u >> (8 * i)) & 0xff));
}

// An llm.c token shard laid out by hand: header fields, then the tokens as uint16 little-endian.
std::string shard_bytes(const std::vector<uint16_t>& tokens, int32_t magic = kTokenShardMagic,
                        int32_t version = kTokenShardVersion, int64_t count = INT64_MIN) {
  std::string b;
  put_le32(b, magic);
  put_le32(b, version);
  put_le32(b, int32_t(count == INT64_MIN ? int64_t(tokens.size()) : count));
  b.resize(1024, '\0');
  for (uint16_t t : tokens) {
    b.push_back(char(t & 0xff));
    b.push_back(char(t >> 8));
  }
  return b;
}

// An llm.c LLaMA 3 shard (magic 20240801, version 7): uint32 tokens.
std::string shard32_bytes(const std::vector<uint32_t>& tokens, int32_t version = kTokenShard32Version) {
  std::string b;
  put_le32(b, kTokenShard32Magic);
  put_le32(b, version);
  put_le32(b, int32_t(tokens.size()));
  b.resize(1024, '\0');
  for (uint32_t t : tokens) put_le32(b, int32_t(t));
  return b;
}

std::vector<int32_t> as_tokens(const std::string& text) {
  std::vector<int32_t> v;
  for (unsigned char c : text) v.push_back(int32_t(c));
  return v;
}

std::string yaml_list(const std::vector<std::string>& items) {
  std::string s = "[";
  for (size_t i = 0; i < items.size(); ++i) s += (i ? ", \"" : "\"") + items[i] + "\"";
  return s + "]";
}

}  // namespace

// ------------------------------------------------------------------------------------- windows

TEST_CASE("LM windows: T + 1 tokens each, non-overlapping, inputs then targets", "[data][lm]") {
  std::vector<int32_t> tokens(23);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(100 + i);
  const Dataset d = make_lm_dataset(TokenStream(tokens), 5, 200, "mem");
  CHECK(d.task == Task::LanguageModel);
  CHECK(d.n == 4);  // (23 - 1) / 5
  CHECK(d.n_features == 5);
  CHECK(d.seq_len == 5);
  CHECK(d.n_outputs() == 200);
  CHECK(d.x.empty());
  CHECK(d.labels.empty());
  int32_t w[6];
  for (size_t i = 0; i < d.n; ++i) {
    d.copy_window(i, w);
    for (size_t j = 0; j <= 5; ++j) CHECK(w[j] == int32_t(100 + i * 5 + j));  // tokens[i*T .. i*T + T]
  }
  // The last window's last target is token 20; tokens 21 and 22 are in no window.
  d.copy_window(3, w);
  CHECK(w[5] == 120);

  // Exactly T + 1 tokens make one window; T make none; k*T tokens make k - 1 (the last target is missing).
  CHECK(make_lm_dataset(TokenStream(std::vector<int32_t>(6, 1)), 5, 2, "six").n == 1);
  CHECK(make_lm_dataset(TokenStream(std::vector<int32_t>(20, 1)), 5, 2, "twenty").n == 3);
  CHECK(make_lm_dataset(TokenStream(std::vector<int32_t>(21, 1)), 5, 2, "twenty-one").n == 4);
  CHECK_THAT(data_error_of([] { make_lm_dataset(TokenStream(std::vector<int32_t>(5, 1)), 5, 2, "five"); }),
             Contains("five: 5 tokens are too few for one window of model.seq_len = 5: a window needs 6 tokens"));
  CHECK_THAT(data_error_of([] { make_lm_dataset(TokenStream({1, 2, 7, 3}, "v"), 1, 7, "v"); }),
             Contains("v: token 2 (0-based) is 7, outside the vocabulary [0, 7)"));
  CHECK_THAT(data_error_of([] { make_lm_dataset(TokenStream({1, -1, 3}), 1, 7, "neg"); }),
             Contains("token 1 (0-based) is 4294967295"));  // a uint32 token beyond int32

  // The sampler indexes windows as samples: every window once per epoch, disjoint slices per rank.
  ShardedSampler s0(d.n, 1, 0, 2, 9, true), s1(d.n, 1, 1, 2, 9, true);
  std::vector<uint32_t> seen;
  for (int64_t step = 0; step < 2; ++step) {
    seen.push_back(s0.batch(step)[0]);
    seen.push_back(s1.batch(step)[0]);
  }
  std::sort(seen.begin(), seen.end());
  CHECK(seen == std::vector<uint32_t>{0, 1, 2, 3});
}

TEST_CASE("split_token_stream: the eval part is the end of the stream", "[data][lm]") {
  std::vector<int32_t> t(100);
  for (size_t i = 0; i < t.size(); ++i) t[i] = int32_t(i);
  const TokenStream s(t);
  auto [train, eval] = split_token_stream(s, 0.1, "s");
  REQUIRE(train.size() == 90);
  REQUIRE(eval.size() == 10);
  CHECK(train.at(89) == 89);
  CHECK(eval.at(0) == 90);
  CHECK(eval.at(9) == 99);
  CHECK(s.heap_bytes() == 400);  // the parts share the stream's memory
  CHECK_THAT(data_error_of([&] { split_token_stream(s, 0.001, "s"); }), Contains("leaves the eval part empty"));
  CHECK_THAT(data_error_of([&] { split_token_stream(s, 0.999, "s"); }), Contains("leaves the train part empty"));
  CHECK_THAT(data_error_of([&] { split_token_stream(s, 0.0, "s"); }), Contains("is not in (0, 1)"));
}

// ---------------------------------------------------------------------------------------- text

TEST_CASE("text files: bytes as tokens, concatenated in order", "[data][lm]") {
  TempDir dir;
  const std::string a = dir.write("a.txt", "Hi\n%\n"), b = dir.write("b.txt", std::string("\xC3\xA9t\xC3\xA9\n", 6));
  const TokenStream t = read_text_tokens({b, a}, *make_tokenizer("bytes"));
  const std::vector<int32_t> want = {0xC3, 0xA9, 't', 0xC3, 0xA9, '\n', 'H', 'i', '\n', '%', '\n'};
  CHECK(t.to_vector() == want);
  CHECK(t.where(0) == std::make_pair(b, size_t(0)));
  CHECK(t.where(7) == std::make_pair(a, size_t(1)));
  // A token outside the vocabulary is named by its file and its index in that file.
  CHECK_THAT(data_error_of([&] { check_tokens(t, 0xC3, "model.vocab_size = 195"); }),
             Contains("data error: " + b + ": token 0 (0-based) is 195, outside the vocabulary [0, 195) (model.vocab_size = 195)"));
  check_tokens(t, 256, "v");
  std::vector<int32_t> t2 = want;
  t2[7] = 500;
  TokenStream s2(std::vector<int32_t>(t2.begin(), t2.begin() + 6), b);
  s2.append(TokenStream(std::vector<int32_t>(t2.begin() + 6, t2.end()), a));
  CHECK_THAT(data_error_of([&] { check_tokens(s2, 256, "v"); }), Contains(a + ": token 1 (0-based) is 500"));
}

TEST_CASE("text files: empty, missing, binary and directories are refused naming the file", "[data][lm]") {
  TempDir dir;
  const std::string ok = dir.write("ok.txt", "fine text\n");
  const std::string empty = dir.write("empty.txt", "");
  const std::string bin = dir.write("idx.dat", std::string("ab\0cd", 5));
  CHECK_THAT(data_error_of([&] { read_text_tokens({ok, empty}, *make_tokenizer("bytes")); }),
             Contains("data error: " + empty + ": empty file"));
  CHECK_THAT(data_error_of([&] { read_text_tokens({dir.file("nope.txt")}, *make_tokenizer("bytes")); }),
             Contains(dir.file("nope.txt") + ": cannot open: No such file or directory"));
  CHECK_THAT(data_error_of([&] { read_text_tokens({ok, bin}, *make_tokenizer("bytes")); }),
             Contains(bin + ": byte 2 (0-based) is NUL: not a text file"));
  CHECK_THAT(data_error_of([&] { read_text_tokens({dir.path()}, *make_tokenizer("bytes")); }), Contains(dir.path() + ": cannot open: Is a directory"));
  if (::geteuid() != 0) {  // root reads anything
    const std::string locked = dir.write("locked.txt", "secret");
    fs::permissions(locked, fs::perms::none);
    CHECK_THAT(data_error_of([&] { read_text_tokens({locked}, *make_tokenizer("bytes")); }), Contains(locked + ": cannot open: Permission denied"));
  }
}

TEST_CASE("paths and globs: sorted matches, no match and the same file twice are errors", "[data][lm]") {
  TempDir dir;
  for (const char* n : {"b2.txt", "a1.txt", "c3.txt", "b10.txt"}) dir.write(n, n);
  const auto files = expand_paths({dir.file("c3.txt"), dir.file("[ab]*.txt")}, "data.text_files");
  CHECK(files == std::vector<std::string>{dir.file("c3.txt"), dir.file("a1.txt"), dir.file("b10.txt"), dir.file("b2.txt")});
  CHECK(expand_paths({dir.file("a?.txt")}, "k") == std::vector<std::string>{dir.file("a1.txt")});
  // A plain path is passed on as it is: its reader names it when it is missing.
  CHECK(expand_paths({dir.file("missing.txt")}, "k") == std::vector<std::string>{dir.file("missing.txt")});

  CHECK_THAT(data_error_of([&] { expand_paths({dir.file("*.bin")}, "data.train_tokens"); }),
             Contains("data error: data.train_tokens: \"" + dir.file("*.bin") + "\" matches no file"));
  CHECK_THAT(data_error_of([&] { expand_paths({}, "data.eval_tokens"); }), Contains("data.eval_tokens: no files given"));
  CHECK_THAT(data_error_of([&] { expand_paths({dir.file("a1.txt"), dir.file("a*.txt")}, "data.text_files"); }),
             Contains(dir.file("a1.txt") + " and " + dir.file("a1.txt") + " are the same file"));
  // The fortunes package's NAME.u8 links: a glob over the folder would read each text twice.
  fs::create_symlink(dir.file("a1.txt"), dir.file("a1.u8"));
  CHECK_THAT(data_error_of([&] { expand_paths({dir.file("a1*")}, "data.text_files"); }),
             Contains(dir.file("a1.txt") + " and " + dir.file("a1.u8") + " are the same file"));
}

// ------------------------------------------------------------------------------------- shards

TEST_CASE("token shards: a valid shard round-trips and shards concatenate in glob order", "[data][lm]") {
  TempDir dir;
  const std::vector<uint16_t> t0 = {0, 1, 255, 256, 50256, 65535}, t1 = {7, 8, 9};
  dir.write("s_000.bin", shard_bytes(t0));
  dir.write("s_001.bin", shard_bytes(t1));
  const TokenStream got = read_token_shard(dir.file("s_000.bin"));
  CHECK(got.to_vector() == std::vector<int32_t>{0, 1, 255, 256, 50256, 65535});
  const TokenStream all = read_token_shards(expand_paths({dir.file("s_*.bin")}, "data.train_tokens"));
  CHECK(all.to_vector() == std::vector<int32_t>{0, 1, 255, 256, 50256, 65535, 7, 8, 9});
  CHECK(all.where(7) == std::make_pair(dir.file("s_001.bin"), size_t(1)));
  int32_t across[3];  // a range over both files
  all.copy(5, 3, across);
  CHECK(std::vector<int32_t>(across, across + 3) == std::vector<int32_t>{65535, 7, 8});
  CHECK(all.slice(4, 8).to_vector() == std::vector<int32_t>{50256, 65535, 7, 8});
  CHECK(all.slice(4, 8).where(3) == std::make_pair(dir.file("s_001.bin"), size_t(1)));
  CHECK(max_token(all) == 65535);
  // A token beyond the vocabulary: file and index within that file.
  CHECK_THAT(data_error_of([&] { check_tokens(all, 50257, "model.vocab_size = 50257"); }),
             Contains(dir.file("s_000.bin") + ": token 5 (0-based) is 65535, outside the vocabulary [0, 50257)"));
  check_tokens(all, 65536, "v");
  CHECK_THAT(data_error_of([&] { check_tokens(all.slice(6, 9), 9, "v"); }),
             Contains(dir.file("s_001.bin") + ": token 2 (0-based) is 9, outside the vocabulary [0, 9)"));
}

TEST_CASE("token shards: every corrupted field is refused naming the file and the problem", "[data][lm]") {
  TempDir dir;
  const std::vector<uint16_t> tok = {1, 2, 3, 4};
  const auto err = [&](const std::string& name, const std::string& bytes) {
    const std::string p = dir.write(name, bytes);
    return data_error_of([&] { read_token_shard(p); });
  };
  const auto path = [&](const std::string& name) { return "data error: " + dir.file(name) + ": "; };
  CHECK_THAT(err("magic.bin", shard_bytes(tok, 12345)),
             Contains(path("magic.bin") + "bad magic 12345 (expected 20240520"));
  CHECK_THAT(err("version.bin", shard_bytes(tok, kTokenShardMagic, 7)),
             Contains(path("version.bin") + "unsupported version 7 of magic 20240520 (only version 1"));
  CHECK_THAT(err("version32.bin", shard32_bytes({1, 2}, 1)),
             Contains(path("version32.bin") + "unsupported version 1 of magic 20240801 (only version 7"));
  std::string cut32 = shard32_bytes({1, 2, 3});
  cut32.pop_back();
  CHECK_THAT(err("cut32.bin", cut32), Contains("the header declares 3 tokens (1036 bytes with the header)"));
  std::string longer = shard_bytes(tok);
  longer += "xy";
  CHECK_THAT(err("long.bin", longer), Contains(path("long.bin") + "size mismatch: the header declares 4 tokens (1032 bytes "
                                                                  "with the header) but the file has 1034 bytes (2 bytes too many)"));
  CHECK_THAT(err("count.bin", shard_bytes(tok, kTokenShardMagic, 1, 5)),
             Contains(path("count.bin") + "truncated: the header declares 5 tokens (1034 bytes with the header) but the file has 1032 bytes"));
  std::string cut = shard_bytes(tok);
  cut.pop_back();
  CHECK_THAT(err("cut.bin", cut), Contains(path("cut.bin") + "truncated: the header declares 4 tokens") && Contains("has 1031 bytes"));
  CHECK_THAT(err("header.bin", shard_bytes(tok).substr(0, 1000)),
             Contains(path("header.bin") + "truncated: 1000 bytes, shorter than the 1024-byte header"));
  CHECK_THAT(err("negative.bin", shard_bytes({}, kTokenShardMagic, 1, -3)), Contains(path("negative.bin") + "bad token count -3"));
  CHECK_THAT(err("zero.bin", shard_bytes({})), Contains(path("zero.bin") + "empty: the header declares 0 tokens"));
  CHECK_THAT(err("empty.bin", ""), Contains(path("empty.bin") + "empty file"));
  CHECK_THAT(data_error_of([&] { read_token_shard(dir.file("absent.bin")); }),
             Contains(path("absent.bin") + "cannot open: No such file or directory"));
}

// ------------------------------------------------------------------------------ load_datasets

TEST_CASE("load_datasets: data.format text splits the end of the stream off for evaluation", "[data][lm]") {
  TempDir dir;
  std::string a_text, b_text;
  for (int i = 0; i < 30; ++i) a_text += char('a' + i % 26);
  for (int i = 0; i < 10; ++i) b_text += char('0' + i);
  const std::string a = dir.write("a.txt", a_text), b = dir.write("b.txt", b_text);
  const std::string cfg_path = dir.write(
      "c.yaml", "model: {type: gpt, seq_len: 4}\ndata:\n  format: text\n  eval_fraction: 0.25\n  text_files: " +
                    yaml_list({a, b}) + "\n");
  const Config cfg = load_config(cfg_path, {});
  const DataSets ds = load_datasets(cfg);
  const std::vector<int32_t> all = as_tokens(a_text + b_text);  // 40 tokens: 30 train, 10 eval
  CHECK(ds.train.tokens.to_vector() == std::vector<int32_t>(all.begin(), all.begin() + 30));
  CHECK(ds.eval.tokens.to_vector() == std::vector<int32_t>(all.begin() + 30, all.end()));
  CHECK(ds.train.n == 7);  // (30 - 1) / 4
  CHECK(ds.eval.n == 2);   // (10 - 1) / 4
  CHECK(ds.train.n_outputs() == 256);
  CHECK(ds.eval.n_outputs() == 256);
  CHECK(ds.train.n_features == 4);
  // The last training window ends at the last training token; no window straddles the split.
  int32_t w[5];
  ds.train.copy_window(6, w);
  CHECK(w[4] == all[28]);
  ds.eval.copy_window(0, w);
  CHECK(w[0] == all[30]);
  ds.eval.copy_window(1, w);
  CHECK(w[4] == all[38]);
  CHECK_THAT(ds.eval.source, Contains("[eval: the last 10 of 40 tokens]"));

  // No eval fraction: no evaluation.
  const DataSets whole = load_datasets(load_config(cfg_path, {"data.eval_fraction=0"}));
  CHECK(whole.train.tokens.to_vector() == all);
  CHECK(whole.eval.n == 0);

  // Too little text says how much one window needs.
  CHECK_THAT(data_error_of([&] { load_datasets(load_config(cfg_path, {"model.seq_len=12"})); }),
             Contains("[eval: the last 10 of 40 tokens]: 10 tokens are too few for one window of model.seq_len = 12: a "
                      "window needs 13 tokens"));
  // A vocabulary smaller than the bytes of the text.
  CHECK_THAT(data_error_of([&] { load_datasets(load_config(cfg_path, {"model.vocab_size=100"})); }),
             Contains(a + ": token 3 (0-based) is 100, outside the vocabulary [0, 100) (model.vocab_size = 100)"));
  // The digest covers the tokens.
  const uint64_t d0 = dataset_digest(ds.train, 0);
  Dataset changed = ds.train;
  std::vector<int32_t> flipped = ds.train.tokens.to_vector();
  flipped[17] ^= 1;
  changed.tokens = TokenStream(flipped);
  CHECK(dataset_digest(changed, 0) != d0);
  CHECK(dataset_digest(ds.train, 0) == d0);
}

TEST_CASE("load_datasets: data.format tokens, eval shards and the inferred vocabulary", "[data][lm]") {
  TempDir dir;
  std::vector<uint16_t> t0(20), t1(13), ev(9);
  for (size_t i = 0; i < t0.size(); ++i) t0[i] = uint16_t(i);
  for (size_t i = 0; i < t1.size(); ++i) t1[i] = uint16_t(1000 + i);
  for (size_t i = 0; i < ev.size(); ++i) ev[i] = uint16_t(2000 + i);
  dir.write("train_001.bin", shard_bytes(t1));
  dir.write("train_000.bin", shard_bytes(t0));
  dir.write("val_000.bin", shard_bytes(ev));
  const std::string cfg_path = dir.write(
      "c.yaml", "model: {type: gpt, seq_len: 8}\ndata:\n  format: tokens\n  train_tokens: " +
                    yaml_list({dir.file("train_*.bin")}) + "\n  eval_tokens: " + yaml_list({dir.file("val_000.bin")}) + "\n");
  const DataSets ds = load_datasets(load_config(cfg_path, {}));
  REQUIRE(ds.train.tokens.size() == 33);
  CHECK(ds.train.tokens.at(0) == 0);      // train_000 first: matches are sorted
  CHECK(ds.train.tokens.at(20) == 1000);
  CHECK(ds.train.tokens.in_files());
  CHECK(ds.train.tokens.heap_bytes() == 0);  // read in place
  CHECK(ds.train.n == 4);              // (33 - 1) / 8
  CHECK(ds.eval.n == 1);
  CHECK(ds.train.vocab == 2009);       // model.vocab_size 0: largest token (of train and eval) + 1
  CHECK(ds.eval.vocab == 2009);
  CHECK(load_datasets(load_config(cfg_path, {"model.vocab_size=50257"})).train.n_outputs() == 50257);
  CHECK_THAT(data_error_of([&] { load_datasets(load_config(cfg_path, {"model.vocab_size=2000"})); }),
             Contains(dir.file("val_000.bin") + ": token 0 (0-based) is 2000, outside the vocabulary [0, 2000)"));
  CHECK_THAT(data_error_of([&] { load_datasets(load_config(cfg_path, {"model.vocab_size=1005"})); }),
             Contains(dir.file("train_001.bin") + ": token 5 (0-based) is 1005"));
  // A pattern that matches nothing, and a shard in both lists.
  CHECK_THAT(data_error_of([&] {
               load_datasets(load_config(cfg_path, {"data.eval_tokens=[\"" + dir.file("test_*.bin") + "\"]"}));
             }),
             Contains("data.eval_tokens: \"" + dir.file("test_*.bin") + "\" matches no file"));
  CHECK_THAT(data_error_of([&] {
               load_datasets(load_config(cfg_path, {"data.eval_tokens=[\"" + dir.file("train_001.bin") + "\"]"}));
             }),
             Contains(dir.file("train_001.bin") + ": is both an evaluation shard"));
  // Without eval shards the eval fraction splits the end of the training stream.
  const DataSets split = load_datasets(load_config(cfg_path, {"data.eval_tokens=[]", "data.eval_fraction=0.5"}));
  CHECK(split.train.tokens.size() == 16);   // 33 - round(16.5)
  CHECK(split.eval.tokens.size() == 17);
  CHECK(split.eval.tokens.at(0) == 16);
}

// ------------------------------------------------------------------------------------ fortunes

TEST_CASE("the fortunes corpus of configs/gpt_fortunes_fp16.yaml loads", "[data][lm][fortunes]") {
  const std::string dir = "/usr/share/games/fortunes/";
  if (!fs::exists(dir + "cookie")) {
    WARN("AMP_TEST_SKIPPED: " << dir << "cookie does not exist (install the fortunes package: scripts/setup.sh)");
    return;
  }
  const Config cfg = load_config(std::string(AMP_SOURCE_DIR) + "/configs/gpt_fortunes_fp16.yaml", {});
  const DataSets ds = load_datasets(cfg);
  const size_t total = ds.train.tokens.size() + ds.eval.tokens.size();
  CHECK(total > 2000000);  // about 2.5 MB of English text
  CHECK(ds.train.vocab == 256);
  CHECK(ds.train.seq_len == 64);
  CHECK(ds.train.n == (ds.train.tokens.size() - 1) / 64);
  CHECK(double(ds.eval.tokens.size()) == Approx(0.05 * double(total)).margin(1));
  // The first window is the first 65 bytes of the first file.
  std::ifstream first(cfg.data.text_files.at(0), std::ios::binary);
  std::string head(65, '\0');
  first.read(&head[0], 65);
  std::vector<int32_t> w0(65);
  ds.train.copy_window(0, w0.data());
  CHECK(w0 == as_tokens(head));
  // The evaluation split is the end of the last file (cookie).
  std::ifstream last(cfg.data.text_files.back(), std::ios::binary | std::ios::ate);
  CHECK(size_t(last.tellg()) > ds.eval.tokens.size());
  // A glob over the whole folder is refused: index files and .u8 links are in it.
  CHECK_THAT(data_error_of([&] { load_datasets(load_config(std::string(AMP_SOURCE_DIR) + "/configs/gpt_fortunes_fp16.yaml",
                                                           {"data.text_files=[\"" + dir + "*\"]"})); }),
             Contains("are the same file"));
}

TEST_CASE("token shards: uint32 (LLaMA 3) shards read in place, and a shard cut short during a run is a data error",
          "[data][lm]") {
  TempDir dir;
  const TokenStream wide = read_token_shard(dir.write("l_000.bin", shard32_bytes({70000, 5, 128255})));
  CHECK(wide.to_vector() == std::vector<int32_t>{70000, 5, 128255});
  CHECK(wide.in_files());
  CHECK(max_token(wide) == 128255);
  // A token of 2^31 or more fits no vocabulary; the message says so, not "outside [0, V)" with the
  // vocabulary the tokens below it give.
  const TokenStream huge = read_token_shard(dir.write("h_000.bin", shard32_bytes({3, 2147483653u, 199})));
  CHECK(max_token(huge) == 199);
  CHECK_THAT(data_error_of([&] { check_tokens(huge, 200, "model.vocab_size = 0: the largest token + 1"); }),
             Contains(dir.file("h_000.bin") + ": token 1 (0-based) is 2147483653: token ids must be below 2^31"));

  // 100000 uint16 tokens; the file then loses all but its first 4096 bytes.
  std::vector<uint16_t> many(100000);
  for (size_t i = 0; i < many.size(); ++i) many[i] = uint16_t(i % 50000);
  const std::string path = dir.write("big.bin", shard_bytes(many));
  const TokenStream s = read_token_shard(path);
  int32_t w[4];
  s.copy(60000, 4, w);
  CHECK(w[0] == 10000);
  fs::resize_file(path, 4096);
  CHECK_THAT(data_error_of([&] { s.copy(90000, 4, w); }),
             Contains("data error: " + path + ": changed while being read: it now has 4096 bytes, and the run reads byte 181024"));
  CHECK_THAT(data_error_of([&] { check_tokens(s, 50000, "v"); }), Contains(path + ": changed while being read"));
  s.copy(10, 4, w);  // what is still there reads as before
  CHECK(w[3] == 13);
}
