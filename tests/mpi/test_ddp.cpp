// The data-parallel protocol, run in process on every rank: one global overflow flag, identical
// scaler state and parameters on every rank after every step, coordinated skips, divergence and
// config-mismatch errors.
#include <sys/resource.h>

#include <catch2/catch.hpp>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "config/config.h"
#include "core/error.h"
#include "core/hash.h"
#include "mpi_env.h"
#include "train/checkpoint.h"
#include "train/state_stream.h"
#include "train/trainer.h"

using namespace amp;

namespace {

std::string small_run(int steps) {
  return "run: {name: ddp_test, steps: " + std::to_string(steps) +
         ", log_interval: 1000, progress: off, out_dir: " + job_out_dir("test_out") + "}\n"
         "model: {hidden: [32, 16]}\n"
         "data: {format: synthetic, batch_size: 8, synthetic: {train_samples: 512, eval_samples: 64}}\n"
         "precision: {compute: fp16, loss_scale: {mode: dynamic, init_scale: 1024, growth_interval: 5}}\n"
         "optimizer: {type: adamw, lr: 0.01}\n";
}

template <typename T>
bool same_on_all_ranks(const T& v) {
  Communicator& c = world();
  std::vector<T> all(size_t(c.size()));
  c.allgather(&v, all.data(), sizeof(T));
  for (const T& x : all)
    if (std::memcmp(&x, &all[0], sizeof(T)) != 0) return false;
  return true;
}

}  // namespace

TEST_CASE("one global overflow flag: every rank skips exactly the planted steps", "[mpi][ddp]") {
  const int n = world().size(), last = n - 1;
  const std::string faults = "faults:\n  inject_nonfinite:\n"
                             "    - {step: 3, rank: " + std::to_string(last) + "}\n"
                             "    - {step: 7, rank: 0, tensor: fc2.weight, value: nan}\n"
                             "    - {step: 8, rank: 0, tensor: fc3.bias}\n"
                             "    - {step: 20, rank: " + std::to_string(last) + ", tensor: fc1.bias}\n";
  // Both ways of reducing: buckets overlapped with backward on the communication thread, and
  // buckets reduced after backward.
  const std::string overlap = GENERATE(std::string("on"), std::string("off"));
  INFO("distributed.overlap=" << overlap);
  Config cfg = config_from(small_run(30) + faults, {"distributed.overlap=" + overlap});
  Trainer t(cfg, world());
  std::set<int64_t> skipped;
  uint64_t prev_hash = hash64(t.master_weights().data(), t.master_weights().size() * 4);
  int64_t prev_overflows = 0;
  size_t disagreements = 0, wrong_param_effect = 0;
  std::vector<std::string> where;
  t.set_step_observer([&](int64_t step, const Trainer::StepObservation& s, const std::vector<int32_t>& flags) {
    const std::vector<float> w = t.master_weights();
    const uint64_t h = hash64(w.data(), w.size() * sizeof(float));
    struct Snapshot {  // no padding: compared bytewise
      int64_t overflows, applied;
      uint64_t hash;
      float scale;
      int32_t tracker, hyst, pad;
    } snap{s.scaler.overflow_steps, s.scaler.optimizer_steps, h, s.scaler.scale, s.scaler.growth_tracker,
           s.scaler.hysteresis_left, 0};
    disagreements += !same_on_all_ranks(snap);
    const bool skip = s.scaler.overflow_steps > prev_overflows;
    if (skip) {
      skipped.insert(step);
      where.push_back(std::to_string(step) + ":" + std::to_string(s.scaler.last_overflow_rank) + ":" +
                      std::to_string(s.scaler.last_overflow_rank_tensor));
      CHECK(flags[OverflowFlags::kAny] == 1);
    }
    wrong_param_effect += skip ? h != prev_hash : h == prev_hash;  // skipped: untouched; else: moved
    prev_hash = h;
    prev_overflows = s.scaler.overflow_steps;
  });
  REQUIRE(t.run() == 0);
  CHECK(disagreements == 0);
  CHECK(wrong_param_effect == 0);
  CHECK(skipped == std::set<int64_t>{3, 7, 8, 20});
  if (n > 1) {
    // Attribution: rank and 1 + tensor index (fc1.weight 0, fc1.bias 1, fc2.weight 2, ..., fc3.bias 5).
    CHECK(where == std::vector<std::string>{"3:" + std::to_string(last) + ":1", "7:0:3", "8:0:6",
                                            "20:" + std::to_string(last) + ":2"});
  }
}

TEST_CASE("persistent overflow at the minimum scale is a divergence error on every rank", "[mpi][ddp]") {
  std::string faults = "faults:\n  inject_nonfinite:\n";
  for (int s = 4; s <= 30; ++s) faults += "    - {step: " + std::to_string(s) + ", rank: 0}\n";
  Config cfg = config_from(small_run(30) + faults,
                           {"precision.loss_scale.min_scale=256", "precision.loss_scale.divergence_steps=5"});
  Trainer t(cfg, world());
  try {
    t.run();
    FAIL("expected a divergence error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Divergence);
    CHECK(e.agreed());
    // 1024 -> 512 -> 256 on steps 4 and 5; steps 6..10 overflow at the minimum: the 5th is step 10.
    CHECK_THAT(e.what(), Catch::Contains("training diverged at step 10"));
    CHECK_THAT(e.what(), Catch::Contains("minimum (256)"));
  }
}

TEST_CASE("ranks that resolve different configs stop with the differing rank named", "[mpi][ddp]") {
  if (world().size() < 2) return;
  const std::string lr = world().rank() == 1 ? "0.02" : "0.01";
  Config cfg = config_from(small_run(5), {"optimizer.lr=" + lr});
  try {
    Trainer t(cfg, world());
    FAIL("expected a configuration mismatch");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Comm);
    CHECK(e.agreed());
    CHECK_THAT(e.what(), Catch::Contains("rank(s) 1 resolved a different config"));
  }
}

TEST_CASE("a checkpoint whose init_params_hash is not 16 hex digits is refused on every rank", "[mpi][ddp]") {
  const std::string out = job_out_dir("init_hash");
  Trainer(config_from(small_run(3), {"run.out_dir=" + out}), world()).run();  // checkpoint.final: step 3
  const std::string bad = out + "/bad/ckpt_step0000000003.bin";
  if (world().rank() == 0) {
    Checkpoint ck = load_checkpoint(out + "/checkpoints/ckpt_step0000000003.bin");
    CHECK(ck.header.count("init_params_hash") == 0);  // no model.init_from: nothing recorded
    ck.header["init_params_hash"] = "0123456789abcdeg";
    save_checkpoint(out + "/bad", ck, 1);
  }
  world().barrier();
  try {
    const Config cfg = config_from(small_run(5), {"run.out_dir=" + out, "checkpoint.resume=" + bad});
    Trainer t(cfg, world());
    FAIL("expected a checkpoint error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Checkpoint);
    CHECK(e.agreed());
    CHECK_THAT(e.what(), Catch::Contains("header field \"init_params_hash\" is \"0123456789abcdeg\", not 16 hex digits"));
  }
}

TEST_CASE("the training state moves to and from the shards in pieces of any size, the same bits", "[mpi][ddp]") {
  // Sharded, with small buckets: several blocks per shard, which pieces of 7 and 5 elements cut
  // everywhere (a block sent in parts to rank 0, a load across shard runs).
  const Config cfg = config_from(small_run(4), {"distributed.zero=1", "distributed.first_bucket_mb=0.001",
                                                "distributed.bucket_mb=0.002", "checkpoint.final=false"});
  Trainer t(cfg, world());
  REQUIRE(t.run() == 0);
  TrainStep& s = t.step();
  using Slot = TrainStep::Slot;
  const size_t n = t.layout().total;
  const bool root = world().rank() == 0;
  const uint64_t replica = s.replica_hash();  // the working copy: cast(masters)
  for (Slot slot : {Slot::Masters, Slot::State1, Slot::State2}) {
    INFO("slot " << int(slot) << " of " << n << " elements, " << world().size() << " rank(s)");
    s.set_piece_elements(TrainStep::kStreamElements);
    const std::vector<float> whole = s.read_whole(slot);  // rank 0's; empty elsewhere
    const uint64_t h = s.slot_hash(slot);
    CHECK(whole.size() == (root ? n : 0));
    if (root) CHECK(h == hash64(whole.data(), n * sizeof(float)));
    CHECK(same_on_all_ranks(h));
    s.set_piece_elements(7);
    CHECK(s.read_whole(slot) == whole);
    CHECK(s.slot_hash(slot) == h);
    // Loaded in pieces of 5: the values negated read back negated, then the originals.
    std::vector<float> neg = whole;
    for (float& v : neg) v = -v;
    const std::vector<float>* sources[] = {&neg, &whole};
    for (const std::vector<float>* src : sources) {
      broadcast_pieces(world(), PieceSource([src](size_t begin, size_t) { return src->data() + begin; }), n,
                       [&](size_t begin, const float* v, size_t count) { s.load(slot, begin, v, count); }, 5);
      CHECK(s.read_whole(slot) == *src);
    }
    CHECK(s.slot_hash(slot) == h);
  }
  CHECK(s.replica_hash() == replica);  // the working copy cast again from the pieces: the same bits
  CHECK(same_on_all_ranks(s.replica_hash()));
}

// Rank 0's weights reader that fails at piece `fail_at` (or at finish() when it is past the last).
class FailingWeights : public amp::WeightPieces {
 public:
  explicit FailingWeights(size_t fail_at) : fail_at_(fail_at) {}
  const float* next(size_t begin, size_t count) override {
    if (pieces_++ == fail_at_) throw Error(ErrorKind::Checkpoint, "checkpoint error: planted: piece " + std::to_string(fail_at_));
    piece_.assign(count, 0.0f);
    for (size_t i = 0; i < count; ++i) piece_[i] = float(begin + i) + 0.5f;
    return piece_.data();
  }
  void finish() override {
    if (pieces_ <= fail_at_) throw Error(ErrorKind::Checkpoint, "checkpoint error: planted: at the finish");
  }

 private:
  size_t fail_at_, pieces_ = 0;
  std::vector<float> piece_;
};

TEST_CASE("initial weights rank 0 fails to read end every rank's set-up with its error, every piece sent", "[mpi][ddp]") {
  const size_t n = 1000, piece = 64, pieces = (n + piece - 1) / piece;
  const bool root = world().rank() == 0;
  for (const size_t fail_at : {size_t(0), size_t(5), pieces}) {  // the first piece, one mid-way, the finish
    INFO("fails at piece " << fail_at << " of " << pieces);
    FailingWeights w(fail_at);
    size_t got = 0, good = 0;
    std::string e = "<no error>";
    try {
      broadcast_pieces(world(), root ? &w : nullptr, n, [&](size_t begin, const float* v, size_t count) {
        ++got;
        if (v[0] == float(begin) + 0.5f && v[count - 1] == float(begin + count - 1) + 0.5f) ++good;
        else CHECK((v[0] == 0.0f && v[count - 1] == 0.0f));  // zeros after the failure
      }, piece);
    } catch (const Error& err) {
      CHECK(err.kind() == ErrorKind::Checkpoint);
      e = err.what();
    }
    CHECK(got == pieces);  // every rank took part in every broadcast
    CHECK(good == std::min(fail_at, pieces));
    // Rank 0's message there; "error on rank 0" on the others (run_agreed).
    CHECK_THAT(e, Catch::Contains(!root ? "error on rank 0"
                                  : fail_at < pieces ? "planted: piece " + std::to_string(fail_at)
                                                     : "planted: at the finish"));
    int next = root ? 42 : 0;  // the next collective pairs up
    world().broadcast(view_of(&next, 1), 0);
    CHECK(next == 42);
  }
}

TEST_CASE("a checkpoint rank 0 cannot write ends every rank's save, the shards sent to its end", "[mpi][ddp]") {
  // Sharded state in small buckets and pieces goes to rank 0 as rank 0 writes the file: whether
  // rank 0 fails before the first byte (the file's name taken by another's file) or half-way (a
  // file size limit: the masters written, the first moment cut, the second not begun), every rank
  // sends every slot to its end and ends with the one agreed error; no temporary is left.
  struct Case {
    std::string tag, message;
  };
  const Case cases[] = {{"taken", "exists and is not a checkpoint of this run"}, {"cut", "write failed: File too large"}};
  for (const Case& c : cases) {
    INFO(c.tag);
    const std::string out = job_out_dir("save_fails_" + c.tag);
    if (world().rank() == 0) std::filesystem::remove_all(out);
    world().barrier();
    const Config cfg = config_from(small_run(3), {"distributed.zero=1", "distributed.first_bucket_mb=0.001",
                                                  "distributed.bucket_mb=0.2", "model.hidden=[256, 256]",
                                                  "run.out_dir=" + out});
    Trainer t(cfg, world());  // (a Trainer keeps a reference to its config)
    REQUIRE(t.layout().total * sizeof(float) > 200000);  // a slot of many buckets and pieces
    t.step().set_piece_elements(20000);  // blocks above MPI's eager limits: a send waits for its receive
    const std::string file = out + "/checkpoints/ckpt_step0000000003.bin";
    rlimit before{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &before) == 0);
    t.set_step_observer([&](int64_t step, const Trainer::StepObservation&, const std::vector<int32_t>&) {
      if (world().rank() != 0 || step != 2) return;  // (the observer sees step 3 after its checkpoint)
      if (c.tag == "taken") {
        std::ofstream(file) << "another program's file\n";
        return;
      }
      // The limit falls inside the first moment, after the masters.
      std::signal(SIGXFSZ, SIG_IGN);
      rlimit cut = before;
      cut.rlim_cur = rlim_t(t.layout().total * sizeof(float) * 3 / 2);
      REQUIRE(::setrlimit(RLIMIT_FSIZE, &cut) == 0);
    });
    try {
      t.run();
      FAIL("the final checkpoint was written");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::Output);
      CHECK(e.agreed());
      if (world().rank() == 0) CHECK_THAT(e.what(), Catch::Contains(c.message));
    }
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &before) == 0);
    world().barrier();
    if (world().rank() == 0) {
      std::vector<std::string> left;
      for (const auto& entry : std::filesystem::directory_iterator(out + "/checkpoints"))
        if (entry.path().filename().string().rfind("ckpt_", 0) == 0) left.push_back(entry.path().filename().string());
      CHECK(left == (c.tag == "taken" ? std::vector<std::string>{"ckpt_step0000000003.bin"} : std::vector<std::string>{}));
    }
    CHECK(same_on_all_ranks(t.step().slot_hash(TrainStep::Slot::State2)));  // the collectives still pair up
  }
}

TEST_CASE("weights that drift on one rank are caught by the hash check, naming rank and step", "[mpi][ddp]") {
  if (world().size() < 2) return;
  const int last = world().size() - 1;
  Config cfg = config_from(small_run(30), {"distributed.hash_interval=10",
                                           "faults.corrupt_params=[{step: 12, rank: " + std::to_string(last) + "}]"});
  Trainer t(cfg, world());
  try {
    t.run();
    FAIL("expected the desync check to stop the run");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Comm);
    CHECK(e.agreed());
    CHECK_THAT(e.what(), Catch::Contains("after step 20 the master weights of rank(s) " + std::to_string(last)));
  }
}

TEST_CASE("gradient buckets around layer sizes: any bucket order of completion, overlap on and off agree", "[mpi][buckets]") {
  // 784-1000-10 with the default 1 MiB first bucket: the first bucket needs fc1.bias, which backward
  // finishes after fc1.weight, so bucket 1 (inside fc1.weight) completes first. Other sizes put
  // bucket edges at, just before and just after tensor boundaries, and a last layer larger than the
  // first bucket.
  struct Case {
    std::string features, hidden, first_mb, bucket_mb;
  };
  const std::vector<Case> cases = {
      {"784", "[1000]", "1", "25"},
      {"784", "[4096, 4096]", "1", "25"},
      {"64", "[512, 300]", "0.0625", "0.0625"},     // 32768 fp16 elements per bucket
      {"64", "[511, 1025]", "0.00390625", "0.01"},  // 2048-element first bucket, ~5243 after
      {"100", "[2000]", "0.001", "0.5"},             // the last layer alone spans several buckets
  };
  for (const Case& c : cases) {
    uint64_t hashes[2] = {0, 0};
    for (int o = 0; o < 2; ++o) {
      const std::string yaml =
          "run: {name: buckets, steps: 4, log_interval: 1000, progress: off, out_dir: " + job_out_dir("buckets") + "}\n"
          "model: {hidden: " + c.hidden + "}\n"
          "data: {format: synthetic, batch_size: 4, synthetic: {train_samples: 256, eval_samples: 0, features: " +
          c.features + ", outputs: 10}}\n"
          "precision: {compute: fp16, loss_scale: {mode: dynamic, init_scale: 1024}}\n"
          "optimizer: {type: sgd, lr: 0.01}\ncheckpoint: {final: false}\n";
      Config cfg = config_from(yaml, {std::string("distributed.overlap=") + (o ? "on" : "off"),
                                      "distributed.first_bucket_mb=" + c.first_mb, "distributed.bucket_mb=" + c.bucket_mb});
      Trainer t(cfg, world());
      REQUIRE(t.run() == 0);
      const std::vector<float> w = t.master_weights();
      hashes[o] = hash64(w.data(), w.size() * sizeof(float));
      CHECK(same_on_all_ranks(hashes[o]));
    }
    INFO(c.features << "-" << c.hidden << " buckets " << c.first_mb << "/" << c.bucket_mb << " MiB");
    CHECK(hashes[0] == hashes[1]);  // the same sums in the same order, during or after backward
  }
}
