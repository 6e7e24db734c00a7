// GPT-2's byte-level BPE (data/gpt2_bpe.h): equality with the reference tokenizer on a committed
// text (tests/data/gpt2_reference.txt, ids from scripts/gpt2_reference_ids.mjs), round trips on
// arbitrary bytes, and errors on broken vocabulary files. Needs the vocabulary files that
// scripts/setup.sh --gpt2 fetches (the test set-up does): without them the cases fail, saying so.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "data/gpt2_bpe.h"
#include "data/prepare.h"
#include "test_util.h"

using namespace amp;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

const Gpt2Bpe& gpt2() {
  const std::string dir = gpt2_vocab_dir();
  INFO("the GPT-2 vocabulary files are fetched by scripts/setup.sh --gpt2 (into " << dir << ")");
  REQUIRE(std::filesystem::exists(dir + "/encoder.json"));
  static const Gpt2Bpe bpe(dir);
  return bpe;
}

}  // namespace

TEST_CASE("gpt2 bpe: the reference tokenizer's ids on a varied text, byte for byte", "[gpt2]") {
  const Gpt2Bpe& bpe = gpt2();
  const std::string text = slurp(std::string(AMP_SOURCE_DIR) + "/tests/data/gpt2_reference.txt");
  std::vector<int32_t> want;
  std::istringstream ids(slurp(std::string(AMP_SOURCE_DIR) + "/tests/data/gpt2_reference.ids"));
  for (int32_t id; ids >> id;) want.push_back(id);
  REQUIRE(text.size() > 60000);
  REQUIRE(want.size() > 18000);
  const std::vector<int32_t> got = bpe.encode(text);
  size_t first = 0;
  while (first < got.size() && first < want.size() && got[first] == want[first]) ++first;
  INFO("first difference at token " << first << " of " << want.size() << ", after the text \""
       << bpe.decode(std::vector<int32_t>(got.begin() + long(first > 8 ? first - 8 : 0), got.begin() + long(first)))
       << "\"");
  CHECK(first == want.size());
  CHECK(got.size() == want.size());
  CHECK(bpe.decode_bytes(got) == text);
}

TEST_CASE("gpt2 bpe: known ids, <|endoftext|> is text when encoding, and the display decode", "[gpt2]") {
  const Gpt2Bpe& bpe = gpt2();
  CHECK(bpe.vocab_size() == 50257);
  CHECK(bpe.encode("Hello world") == std::vector<int32_t>{15496, 995});
  CHECK(bpe.encode(" the") == std::vector<int32_t>{262});
  CHECK(bpe.encode("") == std::vector<int32_t>{});
  // The literal text is not the special token (data preparation inserts that one itself).
  const std::vector<int32_t> eot_text = bpe.encode("<|endoftext|>");
  CHECK(eot_text.size() > 1);
  CHECK(std::find(eot_text.begin(), eot_text.end(), Gpt2Bpe::kEndOfText) == eot_text.end());
  CHECK(bpe.decode({Gpt2Bpe::kEndOfText}) == "<|endoftext|>");
  // Ids beyond the vocabulary (a padded model) are marked; bytes that are not UTF-8 are escaped.
  CHECK(bpe.decode({15496, 50300}) == "Hello<|50300|>");
  CHECK(bpe.decode(bpe.encode("a\xFF" "b\xC3")) == "a\\xFFb\\xC3");
  CHECK(bpe.decode(bpe.encode("caf\xC3\xA9")) == "caf\xC3\xA9");
}

TEST_CASE("gpt2 bpe: decode(encode(x)) == x for arbitrary bytes, invalid UTF-8 included", "[gpt2]") {
  const Gpt2Bpe& bpe = gpt2();
  std::vector<std::string> cases = {
      "\x80",           "\xC3",         "\xE2\x82",          "\xF0\x9F\x98",     "\xC0\xAF",  // lone, truncated, overlong
      "\xED\xA0\x80",   "\xF4\x90\x80\x80", "\xFF\xFE",      "a\x80" "b",        " \xE9t\xE9",  // surrogate, > U+10FFFF, Latin-1
      "  \xA0  x",      "\xC3\xA9\xC3",   "don't\xC3's",      "\n\n\x85\n",       std::string("a\0b", 3)};
  Rng rng(11);
  for (int i = 0; i < 200; ++i) {
    // Random bytes, and random mixes of ASCII, valid multi-byte sequences and stray bytes.
    std::string s;
    const size_t n = 1 + size_t(rng.next_u64() % 400);
    for (size_t k = 0; k < n; ++k) {
      const uint64_t r = rng.next_u64();
      if (i % 2 == 0) s += char(r & 0xFF);
      else if (r % 4 == 0) s += "\xE6\x97\xA5";
      else if (r % 4 == 1) s += char(0x80 + (r >> 8) % 0x80);
      else s += " aZ9'.\t\n"[(r >> 8) % 8];
    }
    cases.push_back(s);
  }
  for (const std::string& s : cases) {
    const std::vector<int32_t> ids = bpe.encode(s);
    INFO("case of " << s.size() << " bytes: " << Tokenizer::printable_text(s));
    CHECK(bpe.decode_bytes(ids) == s);
    for (int32_t id : ids) REQUIRE((id >= 0 && id < Gpt2Bpe::kEndOfText));
  }
}

TEST_CASE("gpt2 bpe: broken vocabulary files are refused naming the file and the line", "[gpt2]") {
  const std::string src = gpt2_vocab_dir();
  gpt2();  // the real files are there
  const std::string dir = (std::filesystem::temp_directory_path() / "amp_gpt2_vocab_test").string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto message = [&] { return amp_test::error_of(ErrorKind::Data, [&] { Gpt2Bpe b(dir); }); };
  CHECK_THAT(message(), Catch::Contains(dir + "/encoder.json") && Catch::Contains("setup.sh --gpt2"));
  std::filesystem::copy_file(src + "/encoder.json", dir + "/encoder.json");
  CHECK_THAT(message(), Catch::Contains(dir + "/vocab.bpe"));
  // A merge line cut short, and a merge whose result is not a token.
  std::string merges = slurp(src + "/vocab.bpe");
  const size_t line3 = merges.find('\n', merges.find('\n', merges.find('\n') + 1) + 1) + 1;
  std::ofstream(dir + "/vocab.bpe", std::ios::binary) << merges.substr(0, line3) << "broken\n" << merges.substr(line3);
  CHECK_THAT(message(), Catch::Contains("vocab.bpe:4: \"broken\": expected a merge"));
  std::ofstream(dir + "/vocab.bpe", std::ios::binary) << "#version: 0.2\nQ \xC4\xA0\n";
  CHECK_THAT(message(), Catch::Contains("vocab.bpe:2: \"Q \xC4\xA0\": the merged token is not in"));
  std::ofstream(dir + "/encoder.json", std::ios::binary) << "{\"a\": 0}";
  CHECK_THAT(message(), Catch::Contains("expected GPT-2's encoder, an object of 50257 tokens, found 1 entries"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("gpt2 bpe: files that are not GPT-2's are refused: a merge repeated or moved, ids swapped, CRLF, other merges", "[gpt2]") {
  const std::string src = gpt2_vocab_dir();
  gpt2();  // the real files are there
  const amp_test::TempDir tmp;
  const std::string dir = tmp.path();
  const std::string encoder = slurp(src + "/encoder.json"), merges = slurp(src + "/vocab.bpe");
  std::vector<std::string> lines;  // vocab.bpe's lines, "#version" first
  for (size_t a = 0, b; a < merges.size(); a = b + 1) {
    b = merges.find('\n', a);
    if (b == std::string::npos) b = merges.size();
    lines.push_back(merges.substr(a, b - a));
  }
  REQUIRE(lines.size() == 50001);  // "#version", then 50000 merges
  auto write = [&](const std::string& enc, const std::vector<std::string>& bpe) {
    std::ofstream(dir + "/encoder.json", std::ios::binary) << enc;
    std::ofstream out(dir + "/vocab.bpe", std::ios::binary);
    for (const std::string& l : bpe) out << l << '\n';
  };
  auto message = [&] { return amp_test::error_of(ErrorKind::Data, [&] { Gpt2Bpe b(dir); }); };
  write(encoder, lines);
  CHECK(message() == "<no exception>");  // the copies themselves are read
  // Line 3 written over by line 2: still 50000 merges; the pair merges twice.
  std::vector<std::string> bpe = lines;
  bpe[2] = bpe[1];
  write(encoder, bpe);
  CHECK_THAT(message(), Catch::Contains("vocab.bpe:3: \"" + lines[1] + "\": the merge of rank 0 again"));
  // Two merges in the other order: rank 1 would make GPT-2's token 256.
  bpe = lines;
  std::swap(bpe[1], bpe[2]);
  write(encoder, bpe);
  CHECK_THAT(message(), Catch::Contains("vocab.bpe:2:") && Catch::Contains("merge rank 0 makes the token of id 257"));
  // The ids of the bytes "a" and "b" swapped in encoder.json.
  std::string swapped = encoder;
  const size_t ia = swapped.find("\"a\": "), ib = swapped.find("\"b\": ");
  REQUIRE((ia != std::string::npos && ib != std::string::npos));
  const size_t ea = swapped.find_first_of(",}", ia), eb = swapped.find_first_of(",}", ib);
  const std::string ida = swapped.substr(ia + 5, ea - ia - 5), idb = swapped.substr(ib + 5, eb - ib - 5);
  swapped.replace(ib + 5, eb - ib - 5, ida);  // b first: it lies after a
  swapped.replace(ia + 5, ea - ia - 5, idb);
  write(swapped, lines);
  CHECK_THAT(message(), Catch::Contains("encoder.json: byte 97's token has id " + idb + "; GPT-2's is " + ida));
  // CRLF line endings: named as such, the carriage return shown escaped.
  std::ofstream(dir + "/encoder.json", std::ios::binary) << encoder;
  {
    std::ofstream out(dir + "/vocab.bpe", std::ios::binary);
    for (const std::string& l : lines) out << l << "\r\n";
  }
  const std::string crlf = message();
  CHECK_THAT(crlf, Catch::Contains("vocab.bpe:1:") && Catch::Contains("\\x0d") && Catch::Contains("CRLF line endings"));
  CHECK(crlf.find('\r') == std::string::npos);
  // Another merge list that the encoder agrees with (two merges and their tokens' ids swapped
  // together): only the digest tells it from GPT-2's.
  bpe = lines;
  const size_t r1 = 40000, r2 = 40001;  // ranks; lines r + 1
  std::swap(bpe[r1 + 1], bpe[r2 + 1]);
  std::string other = encoder;
  for (const auto& [from, to] : {std::pair{256 + r1, 99999999ul}, std::pair{256 + r2, 256 + r1}, std::pair{99999999ul, 256 + r2}}) {
    const std::string f = ": " + std::to_string(from), t = ": " + std::to_string(to);
    size_t at = other.find(f + ",");
    if (at == std::string::npos) at = other.find(f + "}");
    REQUIRE(at != std::string::npos);
    other.replace(at, f.size(), t);
  }
  write(other, bpe);
  CHECK_THAT(message(), Catch::Contains("vocab.bpe: not GPT-2's merges (their digest is"));
}

TEST_CASE("gpt2 bpe: text files read with data.tokenizer gpt2 are GPT-2 tokens, each file after <|endoftext|>", "[gpt2]") {
  const Gpt2Bpe& bpe = gpt2();
  const std::string dir = (std::filesystem::temp_directory_path() / "amp_gpt2_text_test").string();
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/a.txt") << "Hello world";
  std::ofstream(dir + "/b.txt") << " the end\n";
  const std::vector<int32_t> got = read_text_tokens({dir + "/a.txt", dir + "/b.txt"}, *make_tokenizer("gpt2")).to_vector();
  std::vector<int32_t> want = {Gpt2Bpe::kEndOfText, 15496, 995, Gpt2Bpe::kEndOfText};
  for (int32_t t : bpe.encode(" the end\n")) want.push_back(t);
  CHECK(got == want);
  CHECK(make_tokenizer("gpt2")->vocab_size() == 50257);
  CHECK(tokenizer_vocab_size(data_tokenizer_name("gpt2", "tokens")) == 50257);
  CHECK(data_tokenizer_name("auto", "text") == "bytes");
  CHECK(data_tokenizer_name("auto", "tokens").empty());
  CHECK(data_tokenizer_name("none", "tokens").empty());
  std::filesystem::remove_all(dir);
}

namespace {

std::vector<int32_t> shard_tokens(const std::vector<std::string>& files) {
  return files.empty() ? std::vector<int32_t>{} : read_token_shards(files).to_vector();
}

}  // namespace

TEST_CASE("prepare: cutting a document where the pre-tokenizer starts a piece leaves its tokens unchanged", "[gpt2][prepare]") {
  const Gpt2Bpe& bpe = gpt2();
  // Every cut point of the reference text, checked on the 400 bytes around it (the property is
  // local: a piece never reaches across a cut point).
  const std::string text = slurp(std::string(AMP_SOURCE_DIR) + "/tests/data/gpt2_reference.txt");
  size_t cuts = 0;
  for (size_t p = next_safe_cut(text, 0); p < text.size(); p = next_safe_cut(text, p + 1)) {
    const size_t a = p > 200 ? p - 200 : 0, b = std::min(text.size(), p + 200);
    std::vector<int32_t> two = bpe.encode(text.substr(a, p - a));
    const std::vector<int32_t> rest = bpe.encode(text.substr(p, b - p));
    two.insert(two.end(), rest.begin(), rest.end());
    INFO("cut at byte " << p << ": \"" << Tokenizer::printable_text(text.substr(a, p - a)) << "|" << Tokenizer::printable_text(text.substr(p, b - p)) << "\"");
    REQUIRE(two == bpe.encode(text.substr(a, b - a)));
    ++cuts;
  }
  CHECK(cuts > 500);
  // The case a newline alone does not make safe: white space before it.
  const std::string spaced = "word  \n\nNext";
  CHECK(next_safe_cut(spaced, 0) == spaced.size());
  std::vector<int32_t> split = bpe.encode("word  \n\n");
  split.push_back(bpe.encode("Next").at(0));
  CHECK(split != bpe.encode(spaced));  // "  \n\n" at the end is one token, inside the text two
}

TEST_CASE("prepare: shards hold each document after <|endoftext|>, the first bytes as validation, for any threads and cuts", "[gpt2][prepare]") {
  const Gpt2Bpe& bpe = gpt2();
  const std::string dir = (std::filesystem::temp_directory_path() / "amp_prepare_test").string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/in");
  // Two files: the reference text (one document) and documents around "~~~" lines.
  const std::string ref = slurp(std::string(AMP_SOURCE_DIR) + "/tests/data/gpt2_reference.txt");
  const std::string b = "First one.\n~~~\nSecond\n  one\xE2\x80\x94 caf\xC3\xA9\n~~~\n~~~\nThird \xFF one";
  std::ofstream(dir + "/in/a.txt", std::ios::binary) << ref;
  std::ofstream(dir + "/in/b.txt", std::ios::binary) << b;
  std::vector<int32_t> want;
  for (const std::string& doc : {ref, std::string("First one.\n"), std::string("Second\n  one\xE2\x80\x94 caf\xC3\xA9\n"),
                                 std::string("Third \xFF one")}) {
    want.push_back(Gpt2Bpe::kEndOfText);
    for (int32_t t : bpe.encode(doc)) want.push_back(t);
  }
  PrepareOptions o;
  o.inputs = {dir + "/in/*.txt"};
  o.doc_separator = "~~~";
  o.val_fraction = 0.3;
  o.shard_tokens = 5000;
  std::vector<int32_t> first_val;
  for (const auto& [threads, chunk] : std::vector<std::pair<int, size_t>>{{1, size_t(1) << 20}, {3, 200}, {2, 4096}}) {
    o.out_dir = dir + "/out" + std::to_string(threads);
    o.threads = threads;
    o.chunk_bytes = chunk;
    const PrepareResult r = prepare_shards(o, nullptr);
    INFO(threads << " threads, pieces of " << chunk << " bytes");
    CHECK(r.documents == 4);
    CHECK(r.bytes == ref.size() + b.size());
    CHECK(r.train_files.size() == (r.train_tokens + 4999) / 5000);
    std::vector<int32_t> val = shard_tokens(r.val_files), all = val, train = shard_tokens(r.train_files);
    all.insert(all.end(), train.begin(), train.end());
    CHECK(all == want);
    CHECK(val.size() == r.val_tokens);
    // The validation split ends at the token that crosses 30% of the input bytes.
    const size_t val_bytes = size_t(0.3 * double(r.bytes));
    const auto text_bytes = [&](std::vector<int32_t> t) {
      t.erase(std::remove(t.begin(), t.end(), Gpt2Bpe::kEndOfText), t.end());
      return bpe.decode_bytes(t).size();
    };
    CHECK(text_bytes(val) >= val_bytes);
    CHECK(text_bytes(std::vector<int32_t>(val.begin(), val.end() - 1)) < val_bytes);
    if (first_val.empty()) first_val = val;
    CHECK(val == first_val);
  }
  // Never overwritten: a second run into the same folder is refused, naming a shard.
  try {
    prepare_shards(o, nullptr);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Output);
    CHECK_THAT(e.what(), Catch::Contains("data_") && Catch::Contains("already exists"));
  }
  // Bytes: one token per byte, no separator token, the separator lines left out.
  o.tokenizer = "bytes";
  o.out_dir = dir + "/bytes";
  o.val_fraction = 0;
  const PrepareResult r = prepare_shards(o, nullptr);
  CHECK(r.val_files.empty());
  const std::vector<int32_t> bt = shard_tokens(r.train_files);
  const std::string joined = ref + "First one.\nSecond\n  one\xE2\x80\x94 caf\xC3\xA9\nThird \xFF one";
  std::vector<int32_t> jb;
  for (unsigned char c : joined) jb.push_back(c);
  CHECK(bt == jb);
  std::filesystem::remove_all(dir);
}

namespace {

// The files of a folder, sorted by name.
std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("prepare: all or nothing, and a name whose shards another data set's patterns match is refused", "[prepare]") {
  namespace fs = std::filesystem;
  const amp_test::TempDir tmp;
  const std::string dir = tmp.path();
  fs::create_directories(dir + "/in");
  std::string text;
  for (int i = 0; i < 400; ++i) text += "line " + std::to_string(i) + " of the first file\n";
  std::ofstream(dir + "/in/a.txt", std::ios::binary) << text;
  std::ofstream(dir + "/in/b.txt", std::ios::binary) << std::string("text\0more", 9);  // NUL: not text
  PrepareOptions o;
  o.tokenizer = "bytes";
  o.shard_tokens = 1000;  // the first file alone fills 10 shards
  o.val_fraction = 0.1;
  o.out_dir = dir + "/out";
  SECTION("an error after shards were filled leaves none of them") {
    o.inputs = {dir + "/in/a.txt", dir + "/in/b.txt"};
    o.threads = 1;
    o.chunk_bytes = 256;  // the first file is encoded and written before the second is read
    CHECK_THAT(amp_test::error_of(ErrorKind::Data, [&] { prepare_shards(o, nullptr); }), Catch::Contains("b.txt") && Catch::Contains("NUL"));
    CHECK(listing(o.out_dir).empty());
  }
  SECTION("a stopped run's temporaries of this name go; another name's stay") {
    fs::create_directories(o.out_dir);
    for (const char* f : {"data_train_000003.bin.tmp", "data_val_000000.bin.tmp", "other_train_000000.bin.tmp"})
      std::ofstream(o.out_dir + "/" + f) << "partial";
    o.inputs = {dir + "/in/a.txt"};
    const PrepareResult r = prepare_shards(o, nullptr);
    CHECK(r.train_files.size() == (r.train_tokens + 999) / 1000);
    CHECK(r.train_files.size() >= 9);
    CHECK(shard_tokens(r.train_files).size() == r.train_tokens);
    std::vector<std::string> want{"data_info.json", "other_train_000000.bin.tmp"};
    for (const auto* files : {&r.train_files, &r.val_files})
      for (const std::string& f : *files) want.push_back(fs::path(f).filename().string());
    std::sort(want.begin(), want.end());
    CHECK(listing(o.out_dir) == want);
  }
  SECTION("names whose patterns overlap, either way round") {
    o.inputs = {dir + "/in/a.txt"};
    o.name = "a";
    prepare_shards(o, nullptr);
    o.name = "a_train";  // a_train_train_000000.bin would be one of a_train_*.bin
    CHECK_THAT(amp_test::error_of(ErrorKind::Output, [&] { prepare_shards(o, nullptr); }),
               Catch::Contains("the data set \"a\" in this folder would take this run's shards") &&
                   Catch::Contains("a_train_*.bin matches a_train_train_000000.bin"));
    o.name = "a_val";
    CHECK_THAT(amp_test::error_of(ErrorKind::Output, [&] { prepare_shards(o, nullptr); }), Catch::Contains("a_val_*.bin matches a_val_train_000000.bin"));
    o.out_dir = dir + "/out2";
    o.name = "a_train";
    prepare_shards(o, nullptr);
    o.name = "a";
    CHECK_THAT(amp_test::error_of(ErrorKind::Output, [&] { prepare_shards(o, nullptr); }), Catch::Contains("a_train_") && Catch::Contains("already exists"));
    o.name = "ab";  // no overlap
    CHECK_FALSE(prepare_shards(o, nullptr).train_files.empty());
  }
}

TEST_CASE("prepare's info beside its shards: training refuses a split's or a tokenizer's mix-up", "[prepare]") {
  namespace fs = std::filesystem;
  const amp_test::TempDir tmp;
  const std::string dir = tmp.path();
  std::string text;
  for (int i = 0; i < 300; ++i) text += "row " + std::to_string(i) + "\n";
  std::ofstream(dir + "/a.txt", std::ios::binary) << text;
  PrepareOptions o;
  o.tokenizer = "bytes";
  o.inputs = {dir + "/a.txt"};
  o.shard_tokens = 1000;
  o.out_dir = dir + "/s";
  o.name = "x";
  const PrepareResult x = prepare_shards(o, nullptr);
  o.name = "y";
  const PrepareResult y = prepare_shards(o, nullptr);
  REQUIRE(x.train_files.size() >= 2);
  REQUIRE(x.val_files.size() == 1);
  const std::string x_info = o.out_dir + "/x_info.json", y_info = o.out_dir + "/y_info.json";
  // As prepared, with the run's tokenizer or none.
  CHECK_NOTHROW(check_prepared_shards(x.train_files, x.val_files, "bytes"));
  CHECK_NOTHROW(check_prepared_shards(x.train_files, y.val_files, ""));
  CHECK_NOTHROW(check_prepared_shards({x.train_files[1]}, {}, "bytes"));  // a subset
  // A validation shard for training, a training shard for evaluation.
  CHECK_THAT(amp_test::error_of(ErrorKind::Data, [&] { check_prepared_shards({x.train_files[0], x.val_files[0]}, {}, "bytes"); }),
             Catch::Contains(x.val_files[0] + ": a validation shard of the data set \"x\", but data.train_tokens names it") &&
                 Catch::Contains(x_info));
  CHECK_THAT(amp_test::error_of(ErrorKind::Data, [&] { check_prepared_shards(x.train_files, {x.train_files[0]}, "bytes"); }),
             Catch::Contains("a training shard of the data set \"x\", but data.eval_tokens names it"));
  // Another tokenizer than the run's, or than another shard's.
  CHECK_THAT(amp_test::error_of(ErrorKind::Data, [&] { check_prepared_shards(x.train_files, {}, "gpt2"); }),
             Catch::Contains(x.train_files[0] + ": made with the bytes tokenizer, but this run's data.tokenizer is gpt2"));
  std::string info = slurp(y_info);
  info.replace(info.find("\"bytes\""), 7, "\"gpt2\"");
  std::ofstream(y_info, std::ios::trunc) << info;
  CHECK_THAT(amp_test::error_of(ErrorKind::Data, [&] { check_prepared_shards(x.train_files, y.val_files, ""); }),
             Catch::Contains(y.val_files[0] + ": made with the gpt2 tokenizer, but " + x.train_files[0] + " with the bytes"));
  // A shard that the info does not list; an info that is not prepare's.
  fs::copy_file(x.train_files[0], o.out_dir + "/x_train_000099.bin");
  CHECK_THAT(amp_test::error_of(ErrorKind::Data, [&] { check_prepared_shards({o.out_dir + "/x_train_000099.bin"}, {}, ""); }),
             Catch::Contains("not among the shards that prepare wrote for the data set \"x\""));
  std::ofstream(x_info, std::ios::trunc) << "{\"tok";
  CHECK_THAT(amp_test::error_of(ErrorKind::Data, [&] { check_prepared_shards(x.train_files, {}, ""); }),
             Catch::Contains(x_info + ": not the JSON object"));
  // Shards without an info (another program's) pass.
  fs::remove(x_info);
  CHECK_NOTHROW(check_prepared_shards({x.train_files[0], x.val_files[0], o.out_dir + "/x_train_000099.bin"}, {}, "gpt2"));
}

TEST_CASE("gpt2 bpe: long pieces merge with a heap to GPT-2's tokens, in n log n", "[gpt2]") {
  const Gpt2Bpe& ref = gpt2();
  Gpt2Bpe rounds(gpt2_vocab_dir()), heap(gpt2_vocab_dir());
  rounds.use_heap_merge_from(SIZE_MAX);  // GPT-2's rounds for every piece
  heap.use_heap_merge_from(2);           // the heap for every piece of two or more bytes
  const std::string text = slurp(std::string(AMP_SOURCE_DIR) + "/tests/data/gpt2_reference.txt");
  CHECK(heap.encode(text) == ref.encode(text));  // the reference ids (first test case)
  CHECK(rounds.encode(text) == ref.encode(text));
  Rng rng(5);
  for (const std::string alphabet : {"ab", "abcdefghijklmnopqrstuvwxyz", "etaoin", "-=_", "!?."})
    for (const size_t n : {size_t(65), size_t(300), size_t(3000)}) {
      std::string s;
      for (size_t i = 0; i < n; ++i) s += alphabet[rng.next_u64() % alphabet.size()];
      INFO(n << " bytes of \"" << alphabet << "\"");
      CHECK(heap.encode(s) == rounds.encode(s));
      CHECK(heap.encode(" " + s) == rounds.encode(" " + s));
    }
  CHECK(heap.encode(std::string(5000, 'a')) == rounds.encode(std::string(5000, 'a')));
}
