// Checkpoint files: the writer's round trip and pruning, choosing the newest intact one (past
// corrupted files, FIFOs and folders named like checkpoints), and one test per damaged field, each
// built by hand with a valid checksum so the reader has to catch it on its own.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <limits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/files.h"
#include "core/format.h"
#include "core/hash.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/checkpoint_model.h"

using amp::Checkpoint;
using nlohmann::json;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::vector<char> bytes_of(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }

// A checkpoint with distinct, non-constant section contents (a constant would hide misplaced offsets).
Checkpoint sample(int64_t step) {
  Checkpoint ck;
  ck.header = {{"program", "amp_ddp"}, {"step", step}, {"world_size", 2}, {"scaler", {{"scale", 65536.0}}}};
  std::vector<float> master(37);
  for (size_t i = 0; i < master.size(); ++i) master[i] = float(i) * 0.37f - float(step);
  const char* m = reinterpret_cast<const char*>(master.data());
  ck.sections["master"] = std::vector<char>(m, m + master.size() * sizeof(float));
  ck.sections["scalars"] = bytes_of("scalars of step " + std::to_string(step));
  ck.sections["empty"] = {};
  return ck;
}

// The header of a small valid hand-built checkpoint with sections "a" (4 bytes) and "b" (3 bytes).
json base_header() {
  return {{"format", 1},
          {"step", 7},
          {"sections", json::array({{{"name", "a"}, {"offset", 0}, {"bytes", 4}},
                                    {{"name", "b"}, {"offset", 4}, {"bytes", 3}}})}};
}
const std::string kPayload = "abcdefg";

// Writes `bytes` to a file in `dir`, loads it and checks that the load fails with Error(Checkpoint)
// whose message names the file and contains every one of `parts`.
void require_checkpoint_error(const amp_test::TempDir& dir, const std::string& bytes,
                              const std::vector<std::string>& parts) {
  const std::string path = dir.write("ckpt_step0000000007.bin", bytes);
  try {
    amp::load_checkpoint(path);
    FAIL("the checkpoint loaded; expected an error containing " << parts.front());
  } catch (const amp::Error& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(e.kind() == amp::ErrorKind::Checkpoint);
    CHECK(msg.rfind("checkpoint error: " + path + ": ", 0) == 0);
    for (const std::string& p : parts) CHECK(contains(msg, p));
  }
}

void require_header_error(const json& header, const std::vector<std::string>& parts,
                          const std::string& payload = kPayload) {
  amp_test::TempDir dir;
  require_checkpoint_error(dir, amp_test::checkpoint_bytes(header.dump(), payload), parts);
}

void put_u64(std::string& bytes, size_t at, uint64_t v) { std::memcpy(&bytes[at], &v, sizeof v); }

}  // namespace

TEST_CASE("checkpoint: round trip keeps every header field and section byte", "[checkpoint]") {
  amp_test::TempDir dir;
  const Checkpoint ck = sample(42);
  const std::string path = amp::save_checkpoint(dir.path(), ck, 3);
  CHECK(path == dir.file("ckpt_step0000000042.bin"));
  const Checkpoint back = amp::load_checkpoint(path);
  CHECK(back.path == path);
  CHECK(back.step() == 42);
  CHECK(back.header.at("program") == "amp_ddp");
  CHECK(back.header.at("world_size") == 2);
  CHECK(back.header.at("scaler") == ck.header.at("scaler"));
  CHECK(back.header.at("format") == amp::kCheckpointFormat);
  CHECK(back.sections == ck.sections);  // the empty section included

  // The file is exactly the documented layout (existing checkpoints keep loading): the header the
  // writer adds (format, sections end to end in name order), the sections, the checksum.
  json header = ck.header;
  header["format"] = 1;
  header["sections"] = json::array();
  std::string payload;
  for (const auto& [name, bytes] : ck.sections) {
    header["sections"].push_back({{"name", name}, {"offset", payload.size()}, {"bytes", bytes.size()}});
    payload.append(bytes.data(), bytes.size());
  }
  CHECK(amp::read_file_bytes(path) == amp_test::checkpoint_bytes(header.dump(), payload));
  CHECK(amp::parse_checkpoint(amp_test::checkpoint_bytes(header.dump(), payload), "x").sections == ck.sections);
  // The same bytes in memory (what rank 0 sends), and from sections written where they lie.
  CHECK(amp::serialize_checkpoint(ck) == amp::read_file_bytes(path));
  amp_test::TempDir other;
  amp::SectionViews views;
  for (const auto& [name, bytes] : ck.sections) views[name] = amp::SectionView{bytes.data(), bytes.size(), {}};
  CHECK(amp::read_file_bytes(amp::save_checkpoint(other.path(), ck.header, views, 3)) == amp::read_file_bytes(path));
}

TEST_CASE("checkpoint: sections made as they are written, and left in the file when read", "[checkpoint]") {
  // A run's weights are never whole on one host: written as they arrive, read back in pieces.
  amp_test::TempDir dir, other;
  const Checkpoint ck = sample(42);
  const std::string path = amp::save_checkpoint(dir.path(), ck, 3);
  const std::vector<char>& master = ck.sections.at("master");
  amp::SectionViews views;
  for (const auto& [name, bytes] : ck.sections) views[name] = amp::SectionView{bytes.data(), bytes.size(), {}};
  const auto made_in = [&](size_t piece, size_t total) {
    return amp::SectionView{nullptr, master.size(), [&master, piece, total](const amp::ByteSink& sink) {
                              for (size_t at = 0; at < total; at += piece)
                                sink(master.data() + at % master.size(), std::min(piece, total - at));
                            }};
  };
  for (size_t piece : {1, 5, 64, 1000}) {
    views["master"] = made_in(piece, master.size());
    CHECK(amp::read_file_bytes(amp::save_checkpoint(other.path(), ck.header, views, 3)) == amp::read_file_bytes(path));
  }
  // A section made shorter or longer than its table entry: an internal error, no file written.
  for (size_t total : {master.size() - 1, master.size() + 3}) {
    amp_test::TempDir empty;
    views["master"] = made_in(4, total);
    try {
      amp::save_checkpoint(empty.path(), ck.header, views, 3);
      FAIL("a section of " << total << " bytes for a table entry of " << master.size() << " was written");
    } catch (const amp::Error& e) {
      CHECK(e.kind() == amp::ErrorKind::Internal);
      CHECK_THAT(e.what(), Catch::Contains(amp::strcat("section \"master\" made ", total,
                                                       " bytes, not the ", master.size())));
    }
    CHECK(std::filesystem::is_empty(empty.path()));
  }

  // Read with "master" and "empty" left in the file: seen in pieces of 8 bytes as the file is
  // verified, each section first at 0 with no bytes.
  std::vector<std::pair<std::string, uint64_t>> calls;
  std::string seen;
  amp::SectionStream stream;
  stream.names = {"master", "empty", "absent"};
  stream.piece = 8;
  stream.visit = [&](const std::string& name, uint64_t at, const char* data, size_t n) {
    calls.emplace_back(name, at);
    if (name == "master") seen.append(data, n);
  };
  const Checkpoint back = amp::load_checkpoint(path, stream);
  CHECK(back.sections.size() == 1);
  CHECK(back.sections.at("scalars") == ck.sections.at("scalars"));
  CHECK(seen == std::string(master.begin(), master.end()));
  // "empty" comes first in the file (sections in name order): one call; then master's 148 bytes.
  std::vector<std::pair<std::string, uint64_t>> want = {{"empty", 0}, {"master", 0}};
  for (uint64_t at = 0; at < master.size(); at += 8) want.emplace_back("master", at);
  CHECK(calls == want);
  REQUIRE(back.in_file.size() == 2);
  const amp::FileSection where = back.in_file.at("master");
  CHECK(where.bytes == master.size());
  CHECK(where.hash == amp::hash64(master.data(), master.size()));
  CHECK(amp::read_file_bytes(path).compare(where.offset, master.size(), master.data(), master.size()) == 0);
  {
    amp::SectionReader r(back, "master");
    std::vector<char> again(master.size());
    r.read(again.data(), 7);
    CHECK_THROWS_WITH(r.finish(), Catch::Contains("section \"master\": 7 of its 148 bytes read"));
    r.read(again.data() + 7, again.size() - 7);
    r.finish();
    CHECK(again == master);
    CHECK_THROWS_WITH(r.read(again.data(), 1), Catch::Contains("1 bytes asked at 148 of its 148"));
  }
  CHECK_THROWS_WITH(amp::SectionReader(back, "scalars"), Catch::Contains("section \"scalars\" is not left in the file"));
  // Such a checkpoint is not whole in memory: writing it would drop those sections.
  CHECK_THROWS_WITH(amp::serialize_checkpoint(back), Catch::Contains("cannot be written whole"));

  // Read through the descriptor that was verified: a file renamed over the path since is not
  // read, and one changed in place is named.
  const std::string verified = amp::read_file_bytes(path);
  amp::write_file_atomic(path, amp::serialize_checkpoint(sample(43)));
  {
    amp::SectionReader r(back, "master");
    std::vector<char> again(master.size());
    r.read(again.data(), again.size());
    r.finish();
    CHECK(again == master);
  }
  dir.write("ckpt_step0000000042.bin", verified);
  const Checkpoint open = amp::load_checkpoint(path, stream);
  {
    const int fd = ::open(path.c_str(), O_WRONLY);
    REQUIRE(fd >= 0);
    const char flipped = char(verified[open.in_file.at("master").offset + 100] ^ 0x10);
    CHECK(::pwrite(fd, &flipped, 1, off_t(open.in_file.at("master").offset + 100)) == 1);
    ::close(fd);
  }
  amp::SectionReader r(open, "master");
  std::vector<char> again(master.size());
  r.read(again.data(), again.size());
  try {
    r.finish();
    FAIL("a section changed in place since it was verified read as it was");
  } catch (const amp::Error& e) {
    CHECK(e.kind() == amp::ErrorKind::Checkpoint);
    CHECK_THAT(e.what(), Catch::StartsWith("checkpoint error: " + path + ": changed while it was read: section \"master\" hashes to "));
  }
  // A damaged file refused with sections streamed as without (what visit saw does not count).
  CHECK_THROWS_WITH(amp::load_checkpoint(path, stream), Catch::Contains("checksum mismatch"));
}

TEST_CASE("checkpoint: a file written piece by piece is whole or absent", "[checkpoint]") {
  amp_test::TempDir dir;
  const std::string path = dir.file("out.bin");
  amp::write_file_atomic(path, [](const amp::ByteSink& sink) {
    for (int i = 0; i < 3; ++i) sink("abc", 3);
    sink("", 0);
  });
  CHECK(amp::read_file_bytes(path) == "abcabcabc");
  // A producer that fails half-way leaves the old file and no temporary.
  try {
    amp::write_file_atomic(path, [](const amp::ByteSink& sink) {
      sink("xyz", 3);
      throw amp::Error(amp::ErrorKind::Output, "output error: the producer failed");
    });
    FAIL("the producer's error was swallowed");
  } catch (const amp::Error& e) {
    CHECK(std::string(e.what()) == "output error: the producer failed");
  }
  CHECK(amp::read_file_bytes(path) == "abcabcabc");
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()) == 1);
}

TEST_CASE("checkpoint: save refuses a header without a valid step and writes nothing", "[checkpoint]") {
  amp_test::TempDir dir;
  Checkpoint ck = sample(1);
  for (const json& step : {json(-1), json("3"), json(2.5), json()}) {
    ck.header["step"] = step;
    CHECK_THROWS_AS(ck.step(), amp::Error);
    try {
      amp::save_checkpoint(dir.path(), ck, 3);
      FAIL("saved a checkpoint with step " << step.dump());
    } catch (const amp::Error& e) {
      CHECK(e.kind() == amp::ErrorKind::Checkpoint);
      CHECK(contains(e.what(), "header field step"));
    }
  }
  ck.header.erase("step");
  CHECK_THROWS_AS(ck.step(), amp::Error);
  CHECK(amp::list_checkpoints(dir.path()).empty());
}

TEST_CASE("checkpoint: keep prunes the oldest", "[checkpoint]") {
  amp_test::TempDir dir;
  for (int64_t step : {5, 10, 15, 20, 100}) amp::save_checkpoint(dir.path(), sample(step), 2);
  CHECK(amp::list_checkpoints(dir.path()) ==
        std::vector<std::string>{dir.file("ckpt_step0000000100.bin"), dir.file("ckpt_step0000000020.bin")});
  amp::save_checkpoint(dir.path(), sample(101), 0);  // keep 0 still keeps the one just written
  CHECK(amp::list_checkpoints(dir.path()) == std::vector<std::string>{dir.file("ckpt_step0000000101.bin")});
  // Numeric order, not lexical: an 11-digit step is newer than any 10-digit one. Names that are not
  // ckpt_step<digits>.bin and the writer's temporary files are no checkpoints.
  amp::save_checkpoint(dir.path(), sample(12345678901), 5);
  dir.write("ckpt_stepzzz.bin", "x");
  dir.write("ckpt_step0000000200.bin.tmp.12", "x");
  CHECK(amp::list_checkpoints(dir.path()) ==
        std::vector<std::string>{dir.file("ckpt_step12345678901.bin"), dir.file("ckpt_step0000000101.bin")});
}

TEST_CASE("checkpoint: a name of more than 18 digits is no checkpoint, and rotation counts only its run's true ones",
          "[checkpoint]") {
  amp_test::TempDir dir;
  const auto of_run = [](int64_t step) {
    Checkpoint ck = sample(step);
    ck.header["run_id"] = "0123456789abcdef";
    return ck;
  };
  amp::save_checkpoint(dir.path(), of_run(10), 2);
  const std::string twenty = amp::save_checkpoint(dir.path(), of_run(20), 2);
  // A copy of step 20 under a 20-digit name (no step: it sorted as the newest and was kept while a
  // true checkpoint went), and one renamed to step 90 (resume refuses it: it must not count either).
  dir.write("ckpt_step99999999999999999999.bin", amp::read_file_bytes(twenty));
  dir.write("ckpt_step0000000090.bin", amp::read_file_bytes(twenty));
  CHECK(amp::name_step(dir.file("ckpt_step99999999999999999999.bin")) == -1);
  CHECK(amp::name_step(dir.file("ckpt_step000000000000000000000000030.bin")) == 30);  // leading zeros
  CHECK(amp::list_checkpoints(dir.path()) ==
        std::vector<std::string>{dir.file("ckpt_step0000000090.bin"), twenty, dir.file("ckpt_step0000000010.bin")});
  amp::save_checkpoint(dir.path(), of_run(30), 2);
  CHECK(amp::list_checkpoints(dir.path()) ==
        std::vector<std::string>{dir.file("ckpt_step0000000090.bin"), dir.file("ckpt_step0000000030.bin"), twenty});
  CHECK(std::filesystem::exists(dir.file("ckpt_step99999999999999999999.bin")));
}

TEST_CASE("checkpoint: save never writes over a file its run did not write", "[checkpoint]") {
  amp_test::TempDir dir;
  Checkpoint ck = sample(10);
  ck.header["run_id"] = "0123456789abcdef";
  const std::string path = amp::save_checkpoint(dir.path(), ck, 3);
  amp::save_checkpoint(dir.path(), ck, 3);  // its own: written again (a final checkpoint at an interval's step)
  for (const std::string& other : {std::string("my notes\n"), std::string()}) {
    if (other.empty()) {  // another run's checkpoint of that step
      Checkpoint theirs = sample(10);
      theirs.header["run_id"] = "fedcba9876543210";
      amp::save_checkpoint(dir.path(), theirs, 3);
    } else {
      dir.write("ckpt_step0000000010.bin", other);
    }
    const std::string before = amp::read_file_bytes(path);
    try {
      amp::save_checkpoint(dir.path(), ck, 3);
      FAIL("expected an error");
    } catch (const amp::Error& e) {
      CHECK(e.kind() == amp::ErrorKind::Output);
      CHECK(contains(e.what(), path + ": exists and is not a checkpoint of this run (" +
                                   (other.empty() ? "run fedcba9876543210" : "its header cannot be read") + ")"));
    }
    CHECK(amp::read_file_bytes(path) == before);
    std::filesystem::remove(path);
  }
}

TEST_CASE("checkpoint: find_latest_intact skips a corrupted newest file", "[checkpoint]") {
  amp_test::TempDir dir;
  amp::save_checkpoint(dir.path(), sample(10), 3);
  const std::string newest = amp::save_checkpoint(dir.path(), sample(20), 3);
  std::string bytes = amp::read_file_bytes(newest);
  bytes[bytes.size() - 12] ^= 0x40;  // in the last section: only the checksum can tell
  dir.write("ckpt_step0000000020.bin", bytes);
  std::vector<std::string> skipped;
  CHECK(amp::find_latest_intact(dir.path(), &skipped) == dir.file("ckpt_step0000000010.bin"));
  REQUIRE(skipped.size() == 1);
  INFO(skipped[0]);
  CHECK(contains(skipped[0], "checkpoint error: " + newest + ": checksum mismatch"));
  CHECK(amp::find_latest_intact(dir.file("absent"), &skipped) == "");
}

TEST_CASE("checkpoint: identity from the header alone, run ids of 16 hex digits", "[checkpoint]") {
  amp_test::TempDir dir;
  Checkpoint ck = sample(20);
  ck.header["run_id"] = "0123456789abcdef";
  const std::string path = amp::save_checkpoint(dir.path(), ck, 5);
  const amp::CheckpointIdentity id = amp::checkpoint_identity(path);
  CHECK(id.readable);
  CHECK(id.run_id == "0123456789abcdef");
  CHECK(id.step == 20);
  CHECK(amp::name_step(path) == 20);
  CHECK(amp::name_step(dir.file("ckpt_step99999999999999999999.bin")) == -1);  // beyond int64: not a step
  CHECK(amp::name_step(dir.file("other.bin")) == -1);
  // Cut inside its header: not readable (nobody's), never an error.
  std::string bytes = amp::read_file_bytes(path);
  std::ofstream(dir.file("cut.bin"), std::ios::binary) << bytes.substr(0, 30);
  CHECK_FALSE(amp::checkpoint_identity(dir.file("cut.bin")).readable);
  CHECK(amp::valid_run_id("0123456789abcdef"));
  for (const char* bad : {"", "../../victim", "0123456789ABCDEF", "0123456789abcde", "0123456789abcdefa", "ZZZ/../../x"})
    CHECK_FALSE(amp::valid_run_id(bad));
}

TEST_CASE("checkpoint: a FIFO or folder named like a checkpoint is skipped without blocking", "[checkpoint]") {
  amp_test::TempDir dir;
  std::filesystem::create_directory(dir.file("elsewhere"));
  const std::string intact = amp::save_checkpoint(dir.file("elsewhere"), sample(10), 5);
  const std::string fifo = dir.file("ckpt_step0000000030.bin");
  const std::string folder = dir.file("ckpt_step0000000040.bin");
  const std::string dangling = dir.file("ckpt_step0000000050.bin");
  const std::string renamed = dir.file("ckpt_step0000000012.bin");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::filesystem::create_directory(folder);
  std::filesystem::create_symlink(dir.file("nowhere"), dangling);
  std::filesystem::create_symlink(intact, dir.file("ckpt_step0000000010.bin"));  // a link to one is one
  std::filesystem::copy_file(intact, renamed);  // its name says step 12, its header 10: not resumed

  // Run the search on another thread, so that a regression (opening the FIFO for reading) fails the
  // test instead of hanging it: a writer opening the FIFO releases a reader blocked in open().
  auto search = std::async(std::launch::async, [&] {
    std::vector<std::string> skipped;
    const std::string found = amp::find_latest_intact(dir.path(), &skipped);
    return std::make_pair(found, skipped);
  });
  const bool blocked = search.wait_for(std::chrono::seconds(20)) != std::future_status::ready;
  if (blocked) ::close(::open(fifo.c_str(), O_WRONLY | O_NONBLOCK));
  CHECK_FALSE(blocked);
  const auto [found, skipped] = search.get();
  CHECK(found == dir.file("ckpt_step0000000010.bin"));
  const std::string all = [&] {
    std::string s;
    for (const std::string& k : skipped) s += k + "\n";
    return s;
  }();
  INFO(all);
  CHECK(skipped.size() == 4);
  CHECK(contains(all, "checkpoint error: " + renamed + ": named step 12 but holds step 10"));
  CHECK(contains(all, "checkpoint error: " + fifo + ": not a regular file (a FIFO)"));
  CHECK(contains(all, "checkpoint error: " + folder + ": not a regular file (a directory)"));
  CHECK(contains(all, "checkpoint error: " + dangling + ": not a regular file (a dangling symbolic link)"));

  // Pruning leaves them alone: only regular checkpoint files are listed, so only they are removed.
  amp::save_checkpoint(dir.path(), sample(60), 1);
  CHECK(std::filesystem::is_fifo(fifo));
  CHECK(std::filesystem::is_directory(folder));

  // Reading them directly is a clear error too, not a hang or "basic_filebuf::underflow".
  for (const auto& [path, kind] : {std::pair<std::string, std::string>{fifo, "a FIFO"}, {folder, "a directory"}}) {
    try {
      amp::load_checkpoint(path);
      FAIL("loaded " << path);
    } catch (const amp::Error& e) {
      CHECK(e.kind() == amp::ErrorKind::Checkpoint);
      CHECK(std::string(e.what()) == "checkpoint error: " + path + ": not a regular file (" + kind + ")");
    }
  }
  try {
    amp::read_file_bytes(dir.file("absent.bin"));
    FAIL("read a missing file");
  } catch (const amp::Error& e) {
    CHECK(e.kind() == amp::ErrorKind::Checkpoint);
    CHECK(contains(e.what(), "checkpoint error: " + dir.file("absent.bin") + ": cannot open: No such file"));
  }
}

TEST_CASE("checkpoint: damaged prefix", "[checkpoint]") {
  amp_test::TempDir dir;
  const std::string good = amp_test::checkpoint_bytes(base_header().dump(), kPayload);
  REQUIRE(amp::parse_checkpoint(good, "good").step() == 7);

  SECTION("truncated file") {
    require_checkpoint_error(dir, good.substr(0, 20), {"truncated: 20 bytes is shorter than any checkpoint"});
    require_checkpoint_error(dir, "", {"truncated: 0 bytes"});
  }
  SECTION("bad magic") {
    std::string b = good;
    b[3] = 'X';
    amp_test::seal_checkpoint(b);
    require_checkpoint_error(dir, b, {"bad magic"});
  }
  SECTION("unknown format") {
    require_checkpoint_error(dir, amp_test::checkpoint_bytes(base_header().dump(), kPayload, 2),
                             {"checkpoint format 2 is not supported"});
  }
  SECTION("flags") {
    require_checkpoint_error(dir, amp_test::checkpoint_bytes(base_header().dump(), kPayload, 1, 4),
                             {"flags 4 are not supported"});
  }
  SECTION("header length too large") {
    std::string b = good;
    put_u64(b, 16, good.size());
    amp_test::seal_checkpoint(b);
    require_checkpoint_error(dir, b, {"truncated: the header length", "runs past the end of the file"});
  }
  SECTION("header length that overflows an offset") {
    for (uint64_t len : {~uint64_t(0), ~uint64_t(0) - 23, uint64_t(1) << 63}) {
      std::string b = good;
      put_u64(b, 16, len);
      amp_test::seal_checkpoint(b);
      require_checkpoint_error(dir, b, {"header length (" + std::to_string(len) + " bytes)"});
    }
  }
  SECTION("header length too small") {
    std::string b = good;
    put_u64(b, 16, base_header().dump().size() - 1);
    amp_test::seal_checkpoint(b);
    require_checkpoint_error(dir, b, {"header is not valid JSON"});
  }
  SECTION("checksum mismatch") {
    std::string b = good;
    b[b.size() - 10] ^= 1;  // a section byte, the checksum left as it was
    require_checkpoint_error(dir, b, {"checksum mismatch"});
    b = good;
    b.back() ^= 1;  // the checksum itself
    require_checkpoint_error(dir, b, {"checksum mismatch"});
  }
}

TEST_CASE("checkpoint: damaged header", "[checkpoint]") {
  amp_test::TempDir dir;
  SECTION("not JSON") {
    require_checkpoint_error(dir, amp_test::checkpoint_bytes("{\"step\": 7,", kPayload), {"header is not valid JSON"});
    require_checkpoint_error(dir, amp_test::checkpoint_bytes("", ""), {"header is not valid JSON"});
    require_checkpoint_error(dir, amp_test::checkpoint_bytes("{} {}", ""), {"header is not valid JSON"});
  }
  SECTION("not an object") {
    require_header_error(json::array({1, 2}), {"header: expected a JSON object, got an array"});
    require_header_error(json(7), {"header: expected a JSON object, got 7"});
    require_header_error(json(), {"header: expected a JSON object, got null"});
  }
  SECTION("format field") {
    json h = base_header();
    h.erase("format");
    require_header_error(h, {"header field format: missing"});
    for (const json& f : {json(2), json("1"), json(1.0), json(-1)}) {
      h["format"] = f;
      require_header_error(h, {"header field format: expected 1", "got " + f.dump()});
    }
  }
  SECTION("step missing") {
    json h = base_header();
    h.erase("step");
    require_header_error(h, {"header field step: missing"});
  }
  SECTION("step negative, non-integer or out of range") {
    json h = base_header();
    for (const json& s : {json(-1), json(INT64_MIN), json(7.5), json(7.0), json("7"), json(true), json(),
                          json::array(), json(uint64_t(1) << 63), json(~uint64_t(0))}) {
      h["step"] = s;
      require_header_error(h, {"header field step: "});
    }
    h["step"] = -3;
    require_header_error(h, {"header field step: expected an integer >= 0, got -3"});
    h["step"] = uint64_t(1) << 63;
    require_header_error(h, {"header field step: 9223372036854775808 is out of range"});
  }
  SECTION("sections missing or not an array") {
    json h = base_header();
    h.erase("sections");
    require_header_error(h, {"header field sections: missing"}, "");
    for (const json& s : {json::object(), json("a"), json(3), json()}) {
      h["sections"] = s;
      require_header_error(h, {"header field sections: expected an array"}, "");
    }
  }
  SECTION("a section that is not an object, or without a string name") {
    json h = base_header();
    h["sections"][1] = json::array({"b", 4, 3});
    require_header_error(h, {"header field sections[1]: expected an object, got an array"});
    h = base_header();
    h["sections"][0].erase("name");
    require_header_error(h, {"header field sections[0].name: missing"});
    for (const json& n : {json(5), json(), json::object()}) {
      h["sections"][0]["name"] = n;
      require_header_error(h, {"header field sections[0].name: expected a string"});
    }
  }
  SECTION("duplicate names") {
    json h = base_header();
    h["sections"][1]["name"] = "a";
    require_header_error(h, {"header field sections[1].name: \"a\" names an earlier section too"});
  }
  SECTION("bytes missing, negative, not an integer or huge") {
    json h = base_header();
    h["sections"][1].erase("bytes");
    require_header_error(h, {"header field sections[1].bytes: missing"});
    for (const json& b : {json(-3), json("3"), json(3.0), json(1e30), json(), json(false)}) {
      h["sections"][1]["bytes"] = b;
      require_header_error(h, {"header field sections[1].bytes: expected an integer >= 0, got " + b.dump()});
    }
    // Huge sizes whose sum with the offset (or with the header and prefix) would wrap around.
    for (uint64_t n : {~uint64_t(0), ~uint64_t(0) - 3, uint64_t(1) << 63, uint64_t(4)}) {
      h["sections"][1]["bytes"] = n;
      require_header_error(h, {"truncated: header field sections[1] (section \"b\"): 4 + " + std::to_string(n) +
                               " bytes run past the end of the sections (7 bytes in this file)"});
    }
  }
  SECTION("offset missing, negative, not an integer, past the end") {
    json h = base_header();
    h["sections"][0].erase("offset");
    require_header_error(h, {"header field sections[0].offset: missing"});
    for (const json& o : {json(-4), json("0"), json(0.5)}) {
      h["sections"][0]["offset"] = o;
      require_header_error(h, {"header field sections[0].offset: expected an integer >= 0"});
    }
    h = base_header();
    for (uint64_t o : {uint64_t(8), uint64_t(1000000), ~uint64_t(0)}) {
      h["sections"][1]["offset"] = o;
      require_header_error(h, {"header field sections[1] (section \"b\"): offset " + std::to_string(o) +
                               " is past the end of the sections (7 bytes)"});
    }
  }
  SECTION("overlapping, gapped and out-of-order sections") {
    json h = base_header();
    h["sections"][1]["offset"] = 2;
    require_header_error(h, {"sections[1] (section \"b\"): offset 2 overlaps the previous section, which ends at 4"});
    h["sections"][1]["offset"] = 5;
    h["sections"][1]["bytes"] = 2;
    require_header_error(h, {"sections[1] (section \"b\"): offset 5 leaves a gap"});
    h = base_header();
    std::swap(h["sections"][0], h["sections"][1]);
    require_header_error(h, {"sections[0] (section \"b\"): offset 4 leaves a gap"});
    h = base_header();
    h["sections"][0]["offset"] = 3;
    require_header_error(h, {"sections[0] (section \"a\"): offset 3 leaves a gap after the previous section, which "
                             "ends at 0"});
  }
  SECTION("deeply nested values") {
    // Deep enough that any recursion over the header (copying it, dump() in a message) would exhaust
    // the stack: refused while parsing, before anything recurses. 32 levels (the header object's
    // included) are allowed.
    auto nested = [](size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); };
    const std::string head = R"({"format":1,"step":7,"sections":[{"name":"a","offset":0,"bytes":4},)"
                             R"({"name":"b","offset":4,"bytes":3}],"x":)";
    CHECK(amp::parse_checkpoint(amp_test::checkpoint_bytes(head + nested(31) + "}", kPayload), "p").step() == 7);
    require_checkpoint_error(dir, amp_test::checkpoint_bytes(head + nested(32) + "}", kPayload),
                             {"header: nested deeper than 32 levels"});
    require_checkpoint_error(dir, amp_test::checkpoint_bytes(head + nested(200000) + "}", kPayload),
                             {"header: nested deeper than 32 levels"});
    require_checkpoint_error(dir, amp_test::checkpoint_bytes(R"({"format":1,"step":)" + nested(5) + "}", ""),
                             {"header field step: expected an integer >= 0, got an array"});
  }
  SECTION("sections shorter or longer than the file") {
    require_header_error(base_header(), {"truncated: header field sections[1] (section \"b\")"}, "abcde");
    require_header_error(base_header(), {"corrupted: 2 unexpected bytes after the last section"}, "abcdefgXY");
    json h = base_header();
    h["sections"] = json::array();
    require_header_error(h, {"corrupted: 7 unexpected bytes after the last section"});
  }
}

TEST_CASE("checkpoint: unusual but valid headers load", "[checkpoint]") {
  json h = base_header();
  h["future_field"] = {{"nested", json::array({1, 2, 3})}};  // fields the reader does not know are kept
  h["sections"][0]["checksum"] = "later";
  h["sections"].push_back({{"name", ""}, {"offset", 7}, {"bytes", 0}});
  h["step"] = 0;
  const Checkpoint ck = amp::parse_checkpoint(amp_test::checkpoint_bytes(h.dump(), kPayload), "p");
  CHECK(ck.step() == 0);
  CHECK(ck.header.at("future_field") == h["future_field"]);
  CHECK(ck.sections.at("a") == bytes_of("abcd"));
  CHECK(ck.sections.at("b") == bytes_of("efg"));
  CHECK(ck.sections.at("").empty());
  h["step"] = INT64_MAX;
  CHECK(amp::parse_checkpoint(amp_test::checkpoint_bytes(h.dump(), kPayload), "p").step() == INT64_MAX);
}

TEST_CASE("checkpoint: the FP8 scales the eval and sample commands take, checked", "[checkpoint][fp8]") {
  const std::vector<amp::Fp8Tensor> tensors = {{"fc1.input", amp::Fp8::E4M3}, {"fc1.weight", amp::Fp8::E4M3},
                                          {"fc1.grad_output", amp::Fp8::E5M2}};
  amp::Checkpoint ck;
  ck.path = "run/ckpt.bin";
  std::string why;
  CHECK(amp::checkpoint_fp8_scales(ck, tensors, &why).empty());
  CHECK(why == "has no FP8 state (written without precision.compute fp8)");
  ck.header["fp8"] = {{"tensors", {"fc1.input", "fc1.weight", "fc2.grad_output"}}, {"amax_history", 16}};
  CHECK(amp::checkpoint_fp8_scales(ck, tensors, &why).empty());
  CHECK(why == "has other FP8 tensors than this model's");
  ck.header["fp8"]["tensors"] = {"fc1.input", "fc1.weight", "fc1.grad_output"};
  const auto put = [&](std::vector<float> s) {
    ck.sections["fp8_scales"].assign(reinterpret_cast<const char*>(s.data()),
                                     reinterpret_cast<const char*>(s.data() + s.size()));
  };
  put({0.5f, 64.0f, 0x1p-20f});
  CHECK(amp::checkpoint_fp8_scales(ck, tensors, &why) == std::vector<float>{0.5f, 64.0f, 0x1p-20f});
  put({0.5f, 64.0f});
  CHECK_THROWS_WITH(amp::checkpoint_fp8_scales(ck, tensors, &why),
                    "checkpoint error: run/ckpt.bin: its fp8_scales section does not hold the scales of its 3 FP8 tensors");
  for (float bad : {48.0f, 0.0f, -2.0f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
    put({0.5f, 64.0f, bad});
    INFO(bad);
    CHECK_THROWS_WITH(amp::checkpoint_fp8_scales(ck, tensors, &why),
                      Catch::Contains("the FP8 scale of fc1.grad_output is") &&
                          Catch::Contains("not a power of two in [2^-126, 2^126]"));
  }
}
