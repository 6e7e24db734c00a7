// A seeded mutation fuzzer for the checkpoint reader: byte-level damage and structured damage of the
// JSON header, with the checksum recomputed in most iterations so the reader must catch everything
// itself. The reader may accept a file (then what it returns must be consistent) or throw
// Error(Checkpoint); any other exception fails, and crashes or out-of-bounds reads show up when
// this runs in the sanitizer build. AMP_FUZZ_ITERATIONS and AMP_FUZZ_SEED override the defaults.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_util.h"
#include "train/checkpoint.h"

using nlohmann::json;

namespace {

constexpr size_t kPrefix = 24;  // magic, format, flags, header length (see checkpoint.h)

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 0) : fallback;
}

// Valid starting points written by the real writer: different section sets, sizes and headers.
std::vector<std::string> seed_inputs() {
  amp_test::TempDir dir;
  std::vector<std::string> out;
  auto add = [&](amp::Checkpoint ck) { out.push_back(amp::read_file_bytes(amp::save_checkpoint(dir.path(), ck, 10))); };
  amp::Checkpoint a;
  a.header = {{"program", "amp_ddp"}, {"step", 12}, {"world_size", 2}, {"precision", "fp16"},
              {"scaler", {{"scale", 32768.0}, {"growth_tracker", 3}}}, {"layout", json::array({{"fc1", 64}})}};
  std::vector<char> master(64 * 4);
  for (size_t i = 0; i < master.size(); ++i) master[i] = char(i * 7 + 1);
  a.sections["master"] = master;
  a.sections["scalars"] = std::vector<char>(24, 'S');
  add(a);
  amp::Checkpoint b;  // no sections at all
  b.header = {{"step", 0}};
  add(b);
  amp::Checkpoint c;  // an empty section among others
  c.header = {{"step", 300}, {"last_eval_loss", -1.0}, {"train_seconds", 1.5}};
  c.sections["a"] = {};
  c.sections["b"] = {'h', 'e', 'l', 'l', 'o'};
  c.sections["c"] = std::vector<char>(300, '\x80');
  add(c);
  return out;
}

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  uint64_t below(uint64_t n) { return n ? rng_() % n : 0; }
  bool chance(int percent) { return below(100) < uint64_t(percent); }

  // One random damage of `in` (which may be any bytes); `other` is a second input for splices.
  void mutate(std::string& in, const std::string& other) {
    switch (below(10)) {
      case 0: {  // bit flips
        for (uint64_t k = 1 + below(4); k > 0 && !in.empty(); --k) in[below(in.size())] ^= char(1u << below(8));
        break;
      }
      case 1: {  // bytes overwritten with boundary values
        static const unsigned char kInteresting[] = {0x00, 0xff, 0x7f, 0x80, 0x01, 0xfe, '"', '{', '-', '9'};
        for (uint64_t k = 1 + below(3); k > 0 && !in.empty(); --k)
          in[below(in.size())] = char(kInteresting[below(sizeof kInteresting)]);
        break;
      }
      case 2: {  // an aligned 32- or 64-bit field (the prefix's format, flags and header length included)
        static const uint64_t kValues[] = {0, 1, 2, 0x7f, 0x80, 0xff, 0xffff, 0x7fffffff, 0x80000000u, 0xffffffffu,
                                           uint64_t(1) << 63, ~uint64_t(0), ~uint64_t(0) - kPrefix + 1};
        const size_t width = chance(50) ? 8 : 4;
        if (in.size() < width) break;
        uint64_t v = chance(30) ? in.size() - below(64) : kValues[below(sizeof kValues / sizeof kValues[0])];
        const size_t at = chance(60) ? (8 + 4 * below(4)) : below(in.size() - width + 1);
        if (at + width <= in.size()) std::memcpy(&in[at], &v, width);
        break;
      }
      case 3:  // truncation
        in.resize(below(in.size() + 1));
        break;
      case 4: {  // extension
        const uint64_t n = 1 + below(chance(80) ? 16 : 600);
        for (uint64_t k = 0; k < n; ++k) in.push_back(char(below(256)));
        break;
      }
      case 5: {  // splice: the start of one input and the end of another
        const size_t a = size_t(below(in.size() + 1)), b = size_t(below(other.size() + 1));
        in = in.substr(0, a) + other.substr(b);
        break;
      }
      case 6: {  // a range removed or duplicated in the middle
        if (in.empty()) break;
        const size_t at = size_t(below(in.size())), n = size_t(1 + below(std::min<size_t>(in.size() - at, 32)));
        if (chance(50))
          in.erase(at, n);
        else
          in.insert(at, in.substr(at, n));
        break;
      }
      default:  // 7-9: structured damage of the JSON header, most often
        if (!mutate_header(in) && !in.empty()) in[below(in.size())] ^= char(1u << below(8));
        break;
    }
  }

 private:
  static void collect(json& j, std::vector<json*>& nodes) {
    nodes.push_back(&j);
    if (j.is_structured())
      for (auto& child : j) collect(child, nodes);
  }

  json interesting_value() {
    switch (below(16)) {
      case 0: return -1;
      case 1: return INT64_MIN;
      case 2: return uint64_t(1) << 63;
      case 3: return ~uint64_t(0);
      case 4: return 0;
      case 5: return 1.5;
      case 6: return 1e300;
      case 7: return -0.0;
      case 8: return "12";
      case 9: return "";
      case 10: return nullptr;
      case 11: return true;
      case 12: return json::array();
      case 13: return json::object();
      case 14: return int64_t(below(600));
      default: return json::array({{{"name", "x"}, {"offset", below(8)}, {"bytes", below(8)}}});
    }
  }

  // Parses the header of `in`, changes it and writes it back with the new header length. Returns false
  // when `in` has no parseable header (the caller falls back to a byte mutation).
  bool mutate_header(std::string& in) {
    try {
      return try_mutate_header(in);
    } catch (const json::exception&) {  // the mutator's own misstep on an odd header, not the reader's
      return false;
    }
  }

  bool try_mutate_header(std::string& in) {
    if (in.size() < kPrefix) return false;
    uint64_t header_len;
    std::memcpy(&header_len, &in[16], 8);
    if (header_len > in.size() - kPrefix) return false;
    json h = json::parse(in.begin() + kPrefix, in.begin() + long(kPrefix + header_len), nullptr, false);
    if (h.is_discarded()) return false;
    std::string rest = in.substr(kPrefix + size_t(header_len));  // sections and checksum
    json* secs = h.is_object() && h.contains("sections") && h["sections"].is_array() ? &h["sections"] : nullptr;
    switch (below(8)) {
      case 0: {  // any value replaced, or wrapped in arrays around the nesting limit
        std::vector<json*> nodes;
        collect(h, nodes);
        json& node = *nodes[below(nodes.size())];
        if (chance(90)) {
          node = interesting_value();
        } else {
          json v = std::move(node);
          for (uint64_t k = 20 + below(20); k > 0; --k) v = json::array({std::move(v)});
          node = std::move(v);
        }
        break;
      }
      case 1: {  // a key deleted, anywhere
        std::vector<json*> nodes;
        collect(h, nodes);
        json* o = nodes[below(nodes.size())];
        if (o->is_object() && !o->empty()) o->erase(std::next(o->begin(), long(below(o->size()))));
        else if (h.is_object() && !h.empty()) h.erase(std::next(h.begin(), long(below(h.size()))));
        break;
      }
      case 2:  // the top-level fields the reader checks
        if (h.is_object()) {
          static const char* kKeys[] = {"step", "format", "sections"};
          const char* key = kKeys[below(3)];
          if (chance(30)) h.erase(key);
          else h[key] = interesting_value();
        }
        break;
      case 3:  // a section duplicated, removed or two swapped
        if (secs && !secs->empty()) {
          const size_t i = size_t(below(secs->size())), j = size_t(below(secs->size()));
          switch (below(3)) {
            case 0: {
              const json copy = (*secs)[i];
              secs->insert(secs->begin() + long(j), copy);
              break;
            }
            case 1: secs->erase(secs->begin() + long(i)); break;
            default: std::swap((*secs)[i], (*secs)[j]); break;
          }
        }
        break;
      default:  // 4-7: a section's offset, size or name changed
        if (secs && !secs->empty()) {
          json& s = (*secs)[below(secs->size())];
          if (!s.is_object()) break;
          static const char* kFields[] = {"offset", "bytes", "name"};
          const char* field = kFields[below(3)];
          if (field[0] == 'n') {
            const json& peer = (*secs)[below(secs->size())];
            s["name"] = chance(50) && peer.is_object() && peer.contains("name") ? peer["name"] : interesting_value();
          } else {
            const json& old = s.contains(field) ? s[field] : json(0);
            const int64_t base = old.is_number_integer() ? old.get<int64_t>() : 0;
            switch (below(4)) {
              case 0: s[field] = int64_t(uint64_t(base) + 1); break;  // wraps, no signed overflow
              case 1: s[field] = int64_t(uint64_t(base) - 1); break;
              case 2: s[field] = int64_t(below(1000)); break;
              default: s[field] = interesting_value(); break;
            }
          }
          // Sometimes make the sections add up again, so more changes get past the size checks.
          if (chance(40)) rest = realign(*secs, rest);
        }
        break;
    }
    const std::string text = h.dump();
    const uint64_t n = text.size();
    std::string out = in.substr(0, kPrefix);
    std::memcpy(&out[16], &n, 8);
    in = out + text + rest;
    return true;
  }

  // Offsets laid end to end again and the payload resized to their total (when it stays small).
  std::string realign(json& secs, const std::string& rest) {
    uint64_t total = 0;
    for (json& s : secs) {
      if (!s.is_object() || !s.contains("bytes") || !s["bytes"].is_number_unsigned()) return rest;
      s["offset"] = total;
      if (s["bytes"].get<uint64_t>() > 4096) return rest;
      total += s["bytes"].get<uint64_t>();
      if (total > 4096) return rest;
    }
    std::string payload = rest.size() >= 8 ? rest.substr(0, rest.size() - 8) : "";
    payload.resize(size_t(total), 'P');
    return payload + std::string(8, '\0');
  }

  std::mt19937_64 rng_;
};

}  // namespace

TEST_CASE("checkpoint fuzz: the reader either accepts a file or throws a checkpoint error", "[checkpoint][fuzz]") {
  const uint64_t iterations = env_u64("AMP_FUZZ_ITERATIONS", 20000);
  const uint64_t seed = env_u64("AMP_FUZZ_SEED", 20240611);
  std::printf("checkpoint fuzz: AMP_FUZZ_SEED=%llu AMP_FUZZ_ITERATIONS=%llu\n", (unsigned long long)seed,
              (unsigned long long)iterations);
  const auto t0 = std::chrono::steady_clock::now();

  std::vector<std::string> corpus = seed_inputs();
  const size_t n_seeds = corpus.size();
  for (const std::string& s : corpus) REQUIRE_NOTHROW(amp::parse_checkpoint(s, "seed"));

  Mutator m(seed);
  uint64_t sealed = 0, accepted = 0, deep = 0;  // deep: sealed and refused for its header or sections
  std::map<std::string, uint64_t> reasons;     // how the refusals read, to see what was reached
  for (uint64_t it = 0; it < iterations; ++it) {
    std::string in = corpus[m.below(corpus.size())];
    const std::string& other = corpus[m.below(corpus.size())];
    for (uint64_t k = 1 + m.below(3); k > 0; --k) m.mutate(in, other);
    if (m.chance(90)) {
      amp_test::seal_checkpoint(in);
      ++sealed;
    }
    try {
      const amp::Checkpoint ck = amp::parse_checkpoint(in, "fuzz");
      ++accepted;
      // What the reader accepted is self-consistent: a step >= 0 and sections as declared.
      INFO("seed " << seed << ", iteration " << it);
      REQUIRE(ck.step() >= 0);
      const json& secs = ck.header.at("sections");
      REQUIRE(ck.sections.size() == secs.size());
      for (const json& s : secs)
        REQUIRE(ck.sections.at(s.at("name").get<std::string>()).size() == s.at("bytes").get<uint64_t>());
      if (corpus.size() < n_seeds + 64 && in.size() < 8192) corpus.push_back(in);  // accepted variants breed
    } catch (const amp::Error& e) {
      const std::string msg = e.what();
      if (e.kind() != amp::ErrorKind::Checkpoint || msg.rfind("checkpoint error: fuzz: ", 0) != 0)
        FAIL("seed " << seed << ", iteration " << it << ": wrong error: " << msg);
      const std::string what = msg.substr(std::strlen("checkpoint error: fuzz: "));
      const std::string reason =
          what.substr(0, std::min({what.find_first_of("([0123456789\""), what.find(", got"), size_t(48)}));
      ++reasons[reason];
      if (what.find("header field") != std::string::npos || what.find("unexpected bytes") != std::string::npos ||
          what.find("header:") == 0)
        ++deep;
    } catch (const std::exception& e) {
      FAIL("seed " << seed << ", iteration " << it << ": not an amp::Error: " << e.what());
    }
  }

  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("checkpoint fuzz: %llu iterations in %.1f s: %llu sealed, %llu accepted, %llu refused for the header "
              "or sections\n",
              (unsigned long long)iterations, seconds, (unsigned long long)sealed, (unsigned long long)accepted,
              (unsigned long long)deep);
  for (const auto& [reason, count] : reasons) std::printf("  %8llu  %s\n", (unsigned long long)count, reason.c_str());
  if (iterations >= 1000) {
    CHECK(sealed > 0);
    CHECK(accepted > 0);
    CHECK(deep > 0);
  }
}

TEST_CASE("checkpoint fuzz: a file reads as its bytes parse, section by section", "[checkpoint][fuzz]") {
  // load_checkpoint reads a file piece by piece (never whole): on damaged files too it must accept
  // what parse_checkpoint accepts, with the same contents, and refuse the rest with the same words.
  const uint64_t seed = env_u64("AMP_FUZZ_SEED", 20240611) + 1;
  std::vector<std::string> corpus = seed_inputs();
  Mutator m(seed);
  amp_test::TempDir dir;
  const std::string path = dir.file("ckpt_step0000000001.bin");
  size_t accepted = 0, refused = 0;
  for (int it = 0; it < 600; ++it) {
    std::string in = corpus[m.below(corpus.size())];
    if (it > 0)
      for (uint64_t k = 1 + m.below(3); k > 0; --k) m.mutate(in, corpus[m.below(corpus.size())]);
    if (m.chance(90)) amp_test::seal_checkpoint(in);
    dir.write("ckpt_step0000000001.bin", in);
    INFO("seed " << seed << ", iteration " << it);
    std::string from_bytes, from_file;
    amp::Checkpoint a, b;
    try {
      a = amp::parse_checkpoint(in, path);
    } catch (const amp::Error& e) {
      from_bytes = e.what();
    }
    try {
      b = amp::load_checkpoint(path);
    } catch (const amp::Error& e) {
      from_file = e.what();
    }
    REQUIRE(from_file == from_bytes);
    // And with sections left in the file (seen in pieces of 7 bytes as it is verified): the same
    // verdict, the others' contents, the streamed ones' bytes as seen and as read again.
    std::string from_stream;
    std::map<std::string, std::string> seen;
    amp::SectionStream stream;
    stream.names = {"master", "b", "c"};
    stream.piece = 7;
    stream.visit = [&](const std::string& name, uint64_t at, const char* data, size_t n) {
      REQUIRE(at == seen[name].size());
      seen[name].append(data, n);
    };
    amp::Checkpoint c;
    try {
      c = amp::load_checkpoint(path, stream);
    } catch (const amp::Error& e) {
      from_stream = e.what();
    }
    REQUIRE(from_stream == from_bytes);
    if (!from_bytes.empty()) {
      ++refused;
      continue;
    }
    ++accepted;
    REQUIRE(b.header == a.header);
    REQUIRE(b.sections == a.sections);
    REQUIRE(c.header == a.header);
    for (const auto& [name, bytes] : a.sections) {
      if (!stream.names.count(name)) {
        REQUIRE(c.sections.at(name) == bytes);
        continue;
      }
      REQUIRE(c.sections.count(name) == 0);
      REQUIRE(seen.at(name) == std::string(bytes.begin(), bytes.end()));
      amp::SectionReader r(c, name);
      std::string again(bytes.size(), '\0');
      r.read(again.data(), again.size());
      r.finish();
      REQUIRE(again == seen.at(name));
    }
  }
  CHECK(accepted > 0);
  CHECK(refused > 0);
}
