// Fuzzing the config loader with a seeded mutation loop: YAML texts built from valid configs by
// byte-level and token-level mutations (keys, extreme numbers, nesting, duplicates, documents,
// --set overrides). Every outcome must be a loaded config or amp::Error of kind Config; nothing
// else may escape, and the sanitizer build catches memory errors. AMP_FUZZ_ITERATIONS and
// AMP_FUZZ_SEED override the defaults.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/error.h"
#include "core/rng.h"
#include "test_util.h"

namespace {

const std::vector<std::string> kSeeds = {
    "run:\n  name: a\n  steps: 10\nmodel:\n  hidden: [64, 32]\noptimizer:\n  lr: 3e-4\n",
    "run: {steps: 5, threads: 2}\nprecision:\n  compute: fp16\n  loss_scale: {mode: dynamic, init_scale: 1024}\n",
    "data:\n  format: synthetic\n  synthetic: {train_samples: 64, features: 3}\nfaults:\n"
    "  inject_nonfinite: [{step: 2, rank: 0, tensor: fc1.weight, value: nan}]\n",
    "distributed:\n  bucket_mb: 4\n  timeout_s: 30\ncheckpoint:\n  interval: 5\n  resume: auto\n",
    "faults:\n  fail_setup: [{rank: 1, phase: data}]\n  raise_signal: [{step: 3, rank: 0, signal: USR1}]\n",
};

const std::vector<std::string> kTokens = {
    "run", "model", "data", "precision", "optimizer", "distributed", "checkpoint", "faults", "steps", "epochs",
    "hidden", "threads", "batch_size", "eval_batch_size", "n_classes", "lr", "init_scale", "loss_scale", "mode",
    "bucket_mb", "timeout_s", "inject_nonfinite", "fail_setup", "step", "rank", "tensor", "value", "phase",
    ":", ": ", "\n", "\n  ", "  ", "- ", "[", "]", "{", "}", ",", "---\n", "...\n", "&a ", "*a", "!!int ", "!!str ",
    "'", "\"", "#", "?", "|\n", ">\n", "~", "null", "true", "no", ".inf", "-.inf", ".nan", "0", "-1", "1e39",
    "1e308", "1e-50", "4611686018427387904", "9223372036854775807", "18446744073709551616", "4294967306",
    "2.5", "0x10", "1_000", "\t", "\r\n", "\xEF\xBB\xBF", "\xff\xfe", std::string(1, '\0'), "%YAML 1.2\n",
};

std::string mutate(const std::string& in, amp::Rng& rng) {
  std::string s = in;
  const int n_mut = 1 + int(rng.next_u64() % 4);
  for (int m = 0; m < n_mut; ++m) {
    const size_t pos = s.empty() ? 0 : size_t(rng.next_u64() % (s.size() + 1));
    switch (rng.next_u64() % 8) {
      case 0:  // insert a token
        s.insert(pos, kTokens[rng.next_u64() % kTokens.size()]);
        break;
      case 1:  // replace a stretch with a token
        if (!s.empty()) s.replace(pos, std::min<size_t>(1 + rng.next_u64() % 6, s.size() - std::min(pos, s.size())),
                                  kTokens[rng.next_u64() % kTokens.size()]);
        break;
      case 2:  // flip a byte
        if (!s.empty()) s[pos % s.size()] = char(s[pos % s.size()] ^ (1u << (rng.next_u64() % 8)));
        break;
      case 3:  // truncate
        s.resize(pos);
        break;
      case 4:  // duplicate a line
        if (!s.empty()) {
          const size_t b = s.rfind('\n', pos == 0 ? 0 : pos - 1);
          const size_t st = b == std::string::npos ? 0 : b + 1;
          const size_t e = s.find('\n', st);
          s.insert(st, s.substr(st, (e == std::string::npos ? s.size() : e + 1) - st));
        }
        break;
      case 5:  // deep nesting
        s.insert(pos, std::string(1 + rng.next_u64() % 3000, '['));
        break;
      case 6:  // splice another seed
        s.insert(pos, kSeeds[rng.next_u64() % kSeeds.size()]);
        break;
      default:  // delete a stretch
        if (!s.empty()) s.erase(pos % s.size(), 1 + rng.next_u64() % 8);
        break;
    }
  }
  return s;
}

uint64_t env_or(const char* name, uint64_t def) {
  const char* v = std::getenv(name);
  return v ? std::strtoull(v, nullptr, 10) : def;
}

}  // namespace

TEST_CASE("config fuzz: mutated YAML and --set either load or fail as config errors", "[config][fuzz]") {
  const uint64_t iterations = env_or("AMP_FUZZ_ITERATIONS", 3000);
  const uint64_t seed = env_or("AMP_FUZZ_SEED", 20261201);
  std::printf("config fuzz: %llu iterations, seed %llu\n", (unsigned long long)iterations, (unsigned long long)seed);
  amp::Rng rng(seed);
  amp_test::TempDir t;
  size_t loaded = 0, refused = 0;
  for (uint64_t i = 0; i < iterations; ++i) {
    const std::string text = mutate(kSeeds[rng.next_u64() % kSeeds.size()], rng);
    const std::string path = t.write("fuzz.yaml", text);
    std::vector<std::string> sets;
    if (rng.next_u64() % 3 == 0) {
      const std::string v = mutate(kTokens[rng.next_u64() % kTokens.size()], rng);
      sets.push_back((rng.next_u64() % 2 ? "optimizer.lr=" : "model.hidden=") + v);
    }
    try {
      const amp::Config c = amp::load_config(path, sets);
      ++loaded;
      // What loads must be usable: finite numbers within their bounds.
      REQUIRE(std::isfinite(c.optimizer.lr));
      REQUIRE(c.optimizer.lr > 0);
      REQUIRE(c.run.steps <= amp::kMaxSteps);
      REQUIRE(std::isfinite(c.precision.scaler.init_scale));
      for (int64_t h : c.model.hidden) REQUIRE((h >= 1 && h <= (int64_t(1) << 24)));
      REQUIRE(!amp::config_to_yaml(c).empty());
    } catch (const amp::Error& e) {
      ++refused;
      if (e.kind() != amp::ErrorKind::Config) FAIL("iteration " << i << ": not a config error: " << e.what());
      REQUIRE(std::string(e.what()).rfind("config error: ", 0) == 0);
    } catch (const std::exception& e) {
      FAIL("iteration " << i << ": " << typeid(e).name() << " escaped: " << e.what() << "\n--- input ---\n" << text
                         << "\n--- --set ---\n" << (sets.empty() ? std::string("(none)") : sets[0]));
    }
  }
  std::printf("config fuzz: %zu loaded, %zu refused\n", loaded, refused);
  CHECK(loaded > 0);   // the mutations keep some inputs valid: the deep paths are reached
  CHECK(refused > 0);
}
