// Config parsing: defaults, overrides, and every error path with its message and location.
#include <catch2/catch.hpp>

#include "config/config.h"
#include "core/error.h"
#include "test_util.h"

using amp::Config;
using amp::load_config;
using Catch::Contains;
using amp_test::TempDir;

namespace {

// Loads and expects a Config error whose message contains every fragment.
void expect_error(const std::string& path, const std::vector<std::string>& sets,
                  const std::vector<std::string>& fragments) {
  try {
    load_config(path, sets);
    FAIL("expected a config error");
  } catch (const amp::Error& e) {
    CHECK(e.kind() == amp::ErrorKind::Config);
    CHECK(e.exit_code() == 2);
    for (const auto& f : fragments) CHECK_THAT(e.what(), Contains(f));
  }
}

}  // namespace

TEST_CASE("defaults and file values resolve", "[config]") {
  TempDir t;
  const auto p = t.write("a.yaml",
                         "run:\n  name: demo\n  steps: 7\noptimizer:\n  lr: 3e-4\n  type: sgd\n"
                         "model:\n  hidden: [64, 32]\nprecision:\n  compute: bf16\n");
  Config c = load_config(p, {});
  CHECK(c.run.name == "demo");
  CHECK(c.run.steps == 7);
  CHECK(c.optimizer.lr == Approx(3e-4));
  CHECK(c.optimizer.params.kind == amp::OptimizerKind::Sgd);
  CHECK(c.model.hidden == std::vector<int64_t>{64, 32});
  CHECK(c.data.batch_size == 128);                       // default
  CHECK(c.precision.scaler.init_scale == 65536.0f);      // PyTorch's default
  CHECK(c.precision.scaler.growth_interval == 2000);
  CHECK(c.precision.scaler.mode == amp::ScaleMode::None);     // auto: bf16 -> none
  CHECK(c.origin.at("run.name") == p + ":2:9");
  CHECK(c.origin.at("data.batch_size") == "default");
  CHECK(c.resolved_out_dir() == "runs/demo");
}

TEST_CASE("set overrides the file and accepts YAML values", "[config]") {
  TempDir t;
  const auto p = t.write("a.yaml", "optimizer:\n  lr: 0.1\n");
  Config c = load_config(p, {"optimizer.lr=0.5", "model.hidden=[8,8,8]", "precision.compute=fp16",
                             "precision.loss_scale.max_scale=.inf"});
  CHECK(c.optimizer.lr == 0.5);
  CHECK(c.model.hidden.size() == 3);
  CHECK(c.precision.scaler.mode == amp::ScaleMode::Dynamic);
  CHECK(c.origin.at("optimizer.lr") == "--set");
}

TEST_CASE("resolved YAML round-trips through the parser", "[config]") {
  TempDir t;
  const auto p = t.write("a.yaml", "run: {name: \"x y\", steps: 3}\nmodel: {hidden: [5]}\n");
  Config c = load_config(p, {"optimizer.eps=1e-7"});
  const std::string text = amp::config_to_yaml(c);
  const auto p2 = t.write("b.yaml", text);
  Config c2 = load_config(p2, {});
  CHECK(amp::config_to_yaml(c2) == text);
  CHECK(amp::config_hash(c2) == amp::config_hash(c));
  Config c3 = load_config(p2, {"optimizer.eps=1e-6"});
  CHECK(amp::config_hash(c3) != amp::config_hash(c));
}

TEST_CASE("wrong types and out-of-range values name file:line:col and key", "[config]") {
  TempDir t;
  const auto p = t.write("x.yaml", "run:\n  steps: 10\noptimizer:\n  type: adamw\n  lr: fast\n");
  expect_error(p, {}, {"config error: " + p + ":5:7: optimizer.lr: expected a positive number, got \"fast\""});
  expect_error(t.write("n.yaml", "optimizer:\n  lr: -1\n"), {}, {":2:7: optimizer.lr: expected a positive number, got \"-1\""});
  expect_error(t.write("i.yaml", "run:\n  steps: 2.5\n"), {}, {"run.steps: expected an integer in [0, 1000000000], got \"2.5\""});
  expect_error(t.write("b.yaml", "data:\n  shuffle: maybe\n"), {}, {"data.shuffle: expected true or false, got \"maybe\""});
  expect_error(t.write("r.yaml", "optimizer:\n  beta2: 1.0\n"), {}, {"optimizer.beta2: expected a number in [0, 1), got \"1.0\""});
  expect_error(t.write("m.yaml", "optimizer:\n  lr: {a: 1}\n"), {}, {"optimizer.lr: expected a positive number, got a mapping"});
  expect_error(t.write("l.yaml", "model:\n  hidden: 5\n"), {}, {"model.hidden: expected a list of integers in [1, 16777216], got \"5\""});
  expect_error(t.write("l2.yaml", "model:\n  hidden: [5, x]\n"), {}, {":2:15: model.hidden[1]: expected an integer in [1, 16777216], got \"x\""});
  expect_error(t.write("e.yaml", "precision:\n  compute: fp8\n"), {},
               {"precision.compute: expected one of fp32, fp16, bf16, got \"fp8\""});
  expect_error(t.write("s.yaml", "run: 5\n"), {}, {":1:6: run: expected a mapping of keys, got \"5\""});
  expect_error(t.write("nul.yaml", "optimizer:\n  lr:\n"), {}, {"optimizer.lr: expected a positive number, got nothing"});
}

TEST_CASE("unknown keys are errors with a suggestion", "[config]") {
  TempDir t;
  expect_error(t.write("u.yaml", "optimizer:\n  lrr: 0.1\n"), {},
               {":2:3: optimizer.lrr: unknown key (did you mean \"optimizer.lr\"?)"});
  expect_error(t.write("u2.yaml", "optimiser:\n  lr: 0.1\n"), {}, {":1:1: optimiser: unknown key (did you mean \"optimizer\"?)"});
  expect_error(t.write("u3.yaml", "zzzzzz: 1\n"), {}, {"zzzzzz: unknown key"});
}

TEST_CASE("file-level problems: missing, empty, malformed, not a mapping", "[config]") {
  TempDir t;
  expect_error(t.file("missing.yaml"), {}, {"missing.yaml: cannot open: No such file or directory"});
  expect_error(t.write("empty.yaml", ""), {}, {"empty.yaml: the file is empty"});
  expect_error(t.write("comments.yaml", "# only a comment\n"), {}, {"the file is empty"});
  expect_error(t.write("bad.yaml", "run:\n  name: [unclosed\n"), {}, {"bad.yaml:", "malformed YAML"});
  expect_error(t.write("list.yaml", "- 1\n- 2\n"), {}, {"expected a mapping of sections at the top level, got a list"});
  expect_error(t.path(), {}, {"cannot read: is a directory"});  // a directory is not a config file
}

TEST_CASE("bad --set arguments", "[config]") {
  TempDir t;
  const auto p = t.write("ok.yaml", "run:\n  steps: 3\n");
  expect_error(p, {"optimizer.lr"}, {"--set optimizer.lr: expected key=value"});
  expect_error(p, {"=3"}, {"--set =3: expected key=value"});
  expect_error(p, {"optimizer.lr=fast"}, {"config error: --set optimizer.lr=fast: optimizer.lr: expected a positive number, got \"fast\""});
  expect_error(p, {"optimizer.lrr=1"}, {"--set optimizer.lrr=1: optimizer.lrr: unknown key (did you mean \"optimizer.lr\"?)"});
  expect_error(p, {"optimizer=1"}, {"optimizer: is a section"});
  expect_error(p, {"model.hidden=[1,"}, {"model.hidden: malformed value"});
}

TEST_CASE("cross-key rules", "[config]") {
  TempDir t;
  expect_error(t.write("a.yaml", "run: {steps: 0, epochs: 0}\n"), {}, {"run.epochs: set run.steps or run.epochs"});
  expect_error(t.write("b.yaml", "data: {format: csv}\n"), {}, {"data.train_csv: required when data.format is csv"});
  expect_error(t.write("c.yaml", "precision:\n  loss_scale: {min_scale: 4, max_scale: 2}\n"), {},
               {"c.yaml:2:27: precision.loss_scale.min_scale: must not exceed max_scale"});
  expect_error(t.write("d.yaml", "optimizer: {schedule: warmup_cosine, lr: 0.1, min_lr: 0.2}\n"), {},
               {"optimizer.min_lr: must not exceed optimizer.lr"});
  expect_error(t.write("e.yaml", "precision: {compute: fp16, loss_scale: {mode: dynamic, init_scale: 0.5}}\n"), {},
               {"precision.loss_scale.init_scale: must lie in [min_scale, max_scale]"});
}

TEST_CASE("--help lists the keys with their defaults", "[config]") {
  const std::string help = amp::config_keys_help();
  CHECK_THAT(help, Contains("optimizer.lr"));
  CHECK_THAT(help, Contains("a positive number (default 0.001)"));
  CHECK_THAT(help, Contains("precision.loss_scale.growth_interval"));
}
