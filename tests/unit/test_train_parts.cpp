// The trainer's small parts, each against an independent expectation: the sharded sampler, the
// learning-rate schedules, progress formatting, metrics records (no torn line, resume truncation),
// the run-folder lock and checks, and the MLP's parameter layout.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <set>

#include "core/error.h"
#include "core/format.h"
#include "data/sampler.h"
#include "model/param_layout.h"
#include "optim/lr_schedule.h"
#include "test_util.h"
#include "train/metrics.h"
#include "train/progress.h"
#include "train/run_dir.h"
#include "train/sample_text.h"

using namespace amp;
using Catch::Contains;

TEST_CASE("sampler: N ranks x B see exactly 1 rank x N*B, disjoint, every epoch a permutation", "[sampler]") {
  const size_t n = 1000, b = 7;
  for (int world : {1, 2, 3, 4}) {
    std::vector<ShardedSampler> ranks;
    for (int r = 0; r < world; ++r) ranks.emplace_back(n, b, r, world, 42, true);
    ShardedSampler one(n, b * size_t(world), 0, 1, 42, true);
    REQUIRE(ranks[0].steps_per_epoch() == n / (b * size_t(world)));
    REQUIRE(ranks[0].global_batch() == b * size_t(world));
    const int64_t spe = int64_t(ranks[0].steps_per_epoch());
    std::set<uint32_t> epoch0;
    for (int64_t step = 0; step < 2 * spe + 3; ++step) {
      std::vector<uint32_t> joined;
      for (auto& s : ranks) {
        const auto& part = s.batch(step);
        joined.insert(joined.end(), part.begin(), part.end());
      }
      const std::vector<uint32_t> whole = one.batch(step);
      CHECK(joined == whole);  // the same samples in the same order
      if (step < spe) epoch0.insert(joined.begin(), joined.end());
    }
    CHECK(epoch0.size() == size_t(spe) * b * size_t(world));  // no sample twice within an epoch
  }
  // Epochs are reshuffled, reproducibly; without shuffling the order is the identity.
  ShardedSampler a(100, 10, 0, 1, 1, true), c(100, 10, 0, 1, 1, true), plain(100, 10, 0, 1, 1, false);
  const std::vector<uint32_t> epoch0_first = a.batch(0), epoch1_first = a.batch(10);  // copies: batch() reuses its vector
  CHECK(epoch0_first != epoch1_first);
  CHECK(c.batch(10) == epoch1_first);
  std::vector<uint32_t> first(10);
  std::iota(first.begin(), first.end(), 0u);
  CHECK(plain.batch(0) == first);
  CHECK(plain.batch(10) == first);
}

TEST_CASE("sampler: a global batch larger than the data set is a config error", "[sampler]") {
  try {
    ShardedSampler s(100, 30, 0, 4, 1, true);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Config);
    CHECK_THAT(e.what(), Contains("a global batch of 120 (30 per rank x 4 ranks) is larger than the 100 training samples"));
  }
}

TEST_CASE("LR schedules: constant, linear warm-up then cosine to min_lr", "[schedule]") {
  LrSchedule c;
  c.lr = 0.1;
  CHECK(c.at(1) == 0.1);
  CHECK(c.at(1000000) == 0.1);
  LrSchedule w;
  w.kind = LrSchedule::Kind::WarmupCosine;
  w.lr = 1.0;
  w.min_lr = 0.1;
  w.warmup_steps = 10;
  w.total_steps = 110;
  CHECK(w.at(1) == Approx(0.1));
  CHECK(w.at(5) == Approx(0.5));
  CHECK(w.at(10) == Approx(1.0));
  CHECK(w.at(60) == Approx(0.1 + 0.9 * 0.5));  // half-way through the decay: cos = 0
  CHECK(w.at(110) == Approx(0.1));
  CHECK(w.at(500) == Approx(0.1));  // after the end: min_lr
  for (int64_t s = 11; s < 110; ++s) CHECK(w.at(s + 1) <= w.at(s));  // monotone decay
  LrSchedule no_warm = w;
  no_warm.warmup_steps = 0;
  CHECK(no_warm.at(0) == Approx(1.0));
}

TEST_CASE("LR schedules: linear decay, warmup-stable-decay, and a decay length independent of the run's", "[schedule]") {
  LrSchedule lin;
  lin.kind = LrSchedule::Kind::WarmupLinear;
  lin.lr = 1.0, lin.min_lr = 0.1, lin.warmup_steps = 10, lin.total_steps = 110;
  CHECK(lin.at(5) == Approx(0.5));
  CHECK(lin.at(60) == Approx(0.55));  // half-way: the mean of lr and min_lr
  CHECK(lin.at(110) == Approx(0.1));
  CHECK(lin.at(200) == Approx(0.1));
  // decay_steps: the same schedule whatever total_steps is (an extended run keeps it).
  LrSchedule fixed = lin;
  fixed.decay_steps = 100;
  LrSchedule longer = fixed;
  longer.total_steps = 1000;
  for (int64_t s : {1, 10, 37, 60, 110, 111, 500}) CHECK(longer.at(s) == fixed.at(s));
  CHECK(longer.at(500) == Approx(0.1));
  LrSchedule cosine = fixed;
  cosine.kind = LrSchedule::Kind::WarmupCosine;
  cosine.total_steps = 1000;
  CHECK(cosine.at(60) == Approx(0.55));  // cos(pi/2) = 0: half-way here too
  CHECK(cosine.at(110) == Approx(0.1));
  CHECK(cosine.at(900) == Approx(0.1));
  // WSD: warm-up, flat, then linear over the last decay_steps; extending the run extends the flat part.
  LrSchedule wsd;
  wsd.kind = LrSchedule::Kind::Wsd;
  wsd.lr = 1.0, wsd.min_lr = 0.0, wsd.warmup_steps = 10, wsd.total_steps = 110, wsd.decay_steps = 20;
  CHECK(wsd.at(5) == Approx(0.5));
  CHECK(wsd.at(90) == 1.0);
  CHECK(wsd.at(100) == Approx(0.5));
  CHECK(wsd.at(110) == Approx(0.0));
  LrSchedule wsd_long = wsd;
  wsd_long.total_steps = 210;
  CHECK(wsd_long.at(100) == 1.0);
  CHECK(wsd_long.at(200) == Approx(0.5));
  LrSchedule wsd_default = wsd;
  wsd_default.decay_steps = 0;  // the last fifth of the 100 steps after warm-up
  CHECK(wsd_default.at(90) == 1.0);
  CHECK(wsd_default.at(100) == Approx(0.5));
  for (int64_t s = 1; s < 110; ++s) CHECK(wsd.at(s + 1) >= wsd.at(s) - (s >= 90 ? 0.05 + 1e-12 : 0));
}

TEST_CASE("progress formatting: durations, counts and the line's fixed key order", "[progress]") {
  CHECK(format_duration(0) == "0s");
  CHECK(format_duration(59.4) == "59s");
  CHECK(format_duration(61) == "1m01s");
  CHECK(format_duration(3725) == "1h02m");
  CHECK(format_duration(-1) == "?");
  CHECK(format_duration(std::nan("")) == "?");
  CHECK(format_count(999) == "999");
  CHECK(format_count(12345) == "12.3k");
  CHECK(format_count(2.5e6) == "2.50M");
  ProgressLine p;
  p.step = 120;
  p.total = 5000;
  p.loss = 0.41214;
  p.scale = 65536;
  p.skipped = 3;
  p.grad_norm = 1.0234;
  p.lr = 3e-4;
  p.step_ms = 41.23;
  p.samples_per_s = 12345;
  p.eta_s = 200;
  CHECK(format_progress(p) ==
        "step 120/5000 | loss 0.4121 | scale 65536 | skipped 3 | grad_norm 1.02 | lr 3.00e-04 | 41.2 ms | "
        "12.3k samples/s | ETA 3m20s");
  p.step_ms = p.samples_per_s = std::nan("");  // not measured (a resume from an older checkpoint): absent
  CHECK(format_progress(p) == "step 120/5000 | loss 0.4121 | scale 65536 | skipped 3 | grad_norm 1.02 | lr 3.00e-04 | ETA 3m20s");
}

TEST_CASE("metrics: one JSON line per record, and resume truncation keeps records up to the step", "[metrics]") {
  amp_test::TempDir t;
  {
    MetricsWriter m(t.path(), true, false);
    for (int s = 1; s <= 5; ++s) m.record({{"step", s}, {"loss", 1.0 / s}});
    m.record({{"step", 4}, {"eval_loss", 0.5}});
    CHECK(m.failure().empty());
  }
  const std::string path = t.file("metrics.jsonl");
  {
    std::ofstream(path, std::ios::app) << "{\"step\": 6, \"loss\"";  // a line cut short by a crash
  }
  truncate_metrics(path, 3);
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  REQUIRE(lines.size() == 3);
  // One JSON object per line, stamped with its wall-clock time.
  const nlohmann::json first = nlohmann::json::parse(lines[0]);
  CHECK(first["loss"] == 1.0);
  CHECK(first["step"] == 1);
  CHECK(first["time"].get<double>() > 1.7e9);  // Unix seconds, after 2023
  CHECK(first.size() == 3);
  CHECK(lines[2].find("\"step\":3") != std::string::npos);
  // A resumed writer appends after them; a disabled one (other ranks) writes nothing.
  {
    MetricsWriter m(t.path(), true, true);
    m.record({{"step", 4}});
    MetricsWriter off(t.file("other"), false, false);
    off.record({{"step", 1}});
  }
  std::ifstream again(path);
  size_t n = 0;
  for (std::string l; std::getline(again, l);) ++n;
  CHECK(n == 4);
  CHECK_FALSE(std::ifstream(t.file("other/metrics.jsonl")).good());
}

TEST_CASE("metrics: resume truncation refuses what is not a regular file instead of blocking", "[metrics]") {
  amp_test::TempDir t;
  REQUIRE(::mkfifo(t.file("metrics.jsonl").c_str(), 0600) == 0);
  CHECK_THROWS_WITH(truncate_metrics(t.file("metrics.jsonl"), 3), Contains("metrics.jsonl: not a regular file (a FIFO)"));
  truncate_metrics(t.file("absent.jsonl"), 3);  // nothing to keep: fine
}

TEST_CASE("run folders: temporaries of interrupted writes are removed, nothing else", "[rundir]") {
  amp_test::TempDir t;
  for (const char* name : {"ckpt_step0000000010.bin.tmp.4242", "summary.json.tmp.17", "ckpt_step0000000010.bin",
                           "notes.tmp.txt", "x.tmp.", "keep.tmp.12a"})
    std::ofstream(t.file(name)) << "x";
  std::vector<std::string> removed = remove_stale_temporaries(t.path());
  std::sort(removed.begin(), removed.end());
  CHECK(removed == std::vector<std::string>{"ckpt_step0000000010.bin.tmp.4242", "summary.json.tmp.17"});
  for (const char* kept : {"ckpt_step0000000010.bin", "notes.tmp.txt", "x.tmp.", "keep.tmp.12a"})
    CHECK(std::ifstream(t.file(kept)).good());
}

TEST_CASE("metrics: a failed write leaves no torn record and stops recording", "[metrics]") {
  amp_test::TempDir t;
  REQUIRE(::symlink("/dev/full", t.file("metrics.jsonl").c_str()) == 0);
  MetricsWriter m(t.path(), true, false);
  m.record({{"step", 1}});
  CHECK_THAT(m.failure(), Contains("metrics.jsonl: write failed: No space left on device"));
  CHECK_THAT(m.failure(), Contains("output error: "));
  m.record({{"step", 2}});  // dropped, no second failure
}

TEST_CASE("run folders: one lock holder at a time, unwritable folders named with their key", "[rundir]") {
  amp_test::TempDir t;
  {
    RunDirLock lock(t.path(), "run.out_dir");
    // flock locks belong to open file descriptions: a child process (another run) is refused.
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        RunDirLock second(t.path(), "run.out_dir");
        ::_exit(0);
      } catch (const Error& e) {
        ::_exit(std::string(e.what()).find("another run is using this folder (pid ") != std::string::npos ? 3 : 4);
      }
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 3);
  }
  RunDirLock again(t.path(), "run.out_dir");  // released with its holder
  check_writable(t.path(), "run.out_dir", 1024);
  try {
    check_writable("/proc/amp_no_such_dir", "checkpoint.dir", 0);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Output);  // exit 8: the run output cannot be written
    CHECK_THAT(e.what(), Contains("output error: checkpoint.dir: /proc/amp_no_such_dir: cannot create the folder"));
  }
  try {
    check_writable(t.path(), "run.out_dir", uint64_t(1) << 62);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Output);
    CHECK_THAT(e.what(), Contains("free; a checkpoint of this run needs 4.0 EiB"));
  }
  CHECK(printable(std::string("2\0x\n\x7f", 5)) == "2\\x00x\\x0a\\x7f");  // a NUL no longer ends the message
  CHECK(printable(std::string(100, 'a'), 4) == "aaaa...");
  // Well-formed UTF-8 is kept; other bytes are escaped: a lone continuation byte, an overlong form,
  // a surrogate, a sequence cut by the end, and a character the length cut would split.
  CHECK(printable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82") == "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82");
  CHECK(printable("a\x80" "b\xc0\xaf" "c\xed\xa0\x80" "d\xe2\x82") ==
        "a\\x80b\\xc0\\xafc\\xed\\xa0\\x80d\\xe2\\x82");
  CHECK(printable("ab\xc3\xa9", 3) == "ab...");
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(1536) == "1.5 KiB");
}

TEST_CASE("MLP layout: forward order, 32-element aligned offsets, names, sizes", "[layout]") {
  const ParamLayout L = mlp_layout({784, 1000, 10});
  REQUIRE(L.tensors.size() == 4);
  const std::vector<std::string> names = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
  const std::vector<size_t> counts = {784000, 1000, 10000, 10};
  size_t offset = 0;
  for (size_t i = 0; i < 4; ++i) {
    CHECK(L.tensors[i].name == names[i]);
    CHECK(L.tensors[i].span.count == counts[i]);
    CHECK(L.tensors[i].span.offset == offset);
    CHECK(L.tensors[i].span.offset % 32 == 0);
    offset += (counts[i] + 31) / 32 * 32;
  }
  CHECK(L.total == offset);
  CHECK(L.n_params() == 784000 + 1000 + 10000 + 10);
  CHECK(L.tensors[0].rows == 1000);
  CHECK(L.tensors[0].cols == 784);
  CHECK(L.index_of("fc2.weight") == 2);
  CHECK(L.index_of("fc3.weight") == -1);
  CHECK(L.names() == "fc1.weight, fc1.bias, fc2.weight, fc2.bias");
  CHECK(mlp_layout({10, 1}).total == 64);  // weight 10 -> 32, bias 1 -> 32
}

TEST_CASE("sample prompts: token ids where the data names no tokenizer, text there an error", "[sample]") {
  CHECK(encode_prompt("", " 464 2068\n 7 ", 50257, "cfg.yaml:3:11", "sample.prompt") == std::vector<int32_t>{464, 2068, 7});
  CHECK(encode_prompt("", "\n", 50257, "cfg.yaml", "sample.prompt") == std::vector<int32_t>{50256});  // none: the last id
  CHECK(decode_sample("", {464, 2068}) == "464 2068");  // what a sample prints, a prompt again
  const auto error = [](const std::string& prompt) {
    return amp_test::error_of(ErrorKind::Config, [&] { encode_prompt("", prompt, 1000, "--prompt", "sample.prompt"); });
  };
  CHECK(error("hello world") ==
        "config error: --prompt: sample.prompt: \"hello\" is not a token id: the model's data names no tokenizer "
        "(data.tokenizer none), so a prompt is token ids separated by spaces, as its samples print them (\"50256 464\")");
  CHECK_THAT(error("12 3x"), Catch::Contains("\"3x\" is not a token id"));
  CHECK_THAT(error("99999999999"), Catch::Contains("\"99999999999\" is not a token id"));
  CHECK_THAT(error("5 1000"), Catch::Contains("token 1 of the prompt (token ids) is 1000, outside the model's vocabulary of 1000"));
  CHECK_THAT(error("-1"), Catch::Contains("token 0 of the prompt (token ids) is -1"));
  CHECK(encode_prompt("bytes", "hi", 256, "x", "sample.prompt") == std::vector<int32_t>{'h', 'i'});
}
