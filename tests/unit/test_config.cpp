// Config parsing: defaults, overrides, and every error path with its message and location.
#include <catch2/catch.hpp>

#include "config/config.h"
#include "config/config_detail.h"
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
  CHECK(c.origin.at("optimizer.lr") == "--set optimizer.lr=0.5");  // what later errors quote
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
  expect_error(t.write("e.yaml", "precision:\n  compute: fp4\n"), {},
               {"precision.compute: expected one of fp32, fp16, bf16, fp8, got \"fp4\""});
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
               {"precision.loss_scale.init_scale: 0.5 must lie in [min_scale, max_scale]"});
  // The bound the user set is named when init_scale is the default.
  expect_error(t.write("f.yaml", "precision: {compute: fp16}\n"), {"precision.loss_scale.max_scale=1024"},
               {"--set precision.loss_scale.max_scale=1024: precision.loss_scale.max_scale: 1024 is below init_scale (65536, "
                "the default)"});
  expect_error(t.write("g.yaml", "run: {name: \"\"}\n"), {}, {"run.name: \"\" is not a folder name"});
  expect_error(t.write("h.yaml", "run: {name: a/b}\n"), {}, {"run.name: \"a/b\" is not a folder name"});
  expect_error(t.write("i.yaml", "checkpoint: {resume: \"\"}\n"), {},
               {"checkpoint.resume: is empty: use none, auto or the path of a checkpoint"});
  // IDX evaluation files go in pairs: the one the user set is named, the other's value is shown.
  expect_error(t.write("j.yaml", "run: {steps: 1}\n"), {"data.eval_images="},
               {"--set data.eval_images=: data.eval_images: is empty (no evaluation), but data.eval_labels is "
                "\"/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz\" (the default): set both empty, or both "
                "to files"});
  expect_error(t.write("k.yaml", "data:\n  eval_labels: \"\"\n"), {},
               {"k.yaml:2:16: data.eval_labels: is empty (no evaluation), but data.eval_images is "
                "\"/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz\" (the default)"});
  expect_error(t.write("l.yaml", "data: {eval_images: \"\", eval_labels: b.gz}\n"), {},
               {"l.yaml:1:38: data.eval_labels: is \"b.gz\", but data.eval_images is empty (no evaluation): set both empty"});
}

TEST_CASE("--help lists the keys with their defaults", "[config]") {
  const std::string help = amp::config_keys_help();
  CHECK_THAT(help, Contains("optimizer.lr"));
  CHECK_THAT(help, Contains("a positive number (default 0.001)"));
  CHECK_THAT(help, Contains("precision.loss_scale.growth_interval"));
  // Every key's text whole, on its own line, however long (model.recompute's is over 600
  // characters; a fixed 512-byte line once cut it and ran the next key onto it).
  for (const amp::config_detail::Key& k : amp::config_detail::keys()) {
    INFO(k.path);
    CHECK_THAT(help, Contains(std::string("\n      ") + k.help + "\n"));
  }
}

// ------------------------------------------------------------------ gpt and language-model keys

TEST_CASE("gpt, token data and sample keys: defaults and values", "[config]") {
  TempDir t;
  Config d = load_config(t.write("d.yaml", "run: {steps: 1}\n"), {});
  CHECK(d.model.type == amp::ModelType::Mlp);
  CHECK(d.model.n_layer == 2);
  CHECK(d.model.n_head == 4);
  CHECK(d.model.n_embd == 128);
  CHECK(d.model.seq_len == 64);
  CHECK(d.model.vocab_size == 0);
  CHECK(d.data.text_files.empty());
  CHECK(d.data.train_tokens.empty());
  CHECK(d.data.eval_tokens.empty());
  CHECK(d.run.sample_interval == 0);
  CHECK(d.sample.prompt == "\n");
  CHECK(d.sample.tokens == 200);
  CHECK(d.sample.temperature == 0.8);
  CHECK(d.sample.top_k == 40);
  CHECK(d.sample.seed == 1);

  const auto p = t.write("g.yaml",
                         "run: {sample_interval: 25}\n"
                         "model: {type: gpt, n_layer: 12, n_head: 12, n_embd: 768, seq_len: 1024, vocab_size: 50257}\n"
                         "data:\n  format: tokens\n  train_tokens:\n    - \"/d/train_*.bin\"\n    - /d/extra.bin\n"
                         "  eval_tokens: [\"/d/val_00000[0-9].bin\"]\n"
                         "sample: {prompt: \"Once upon\", tokens: 7, temperature: 1.5, top_k: 0, seed: 9}\n");
  Config c = load_config(p, {});
  CHECK(c.model.type == amp::ModelType::Gpt);
  CHECK(c.model.n_layer == 12);
  CHECK(c.model.n_embd == 768);
  CHECK(c.model.seq_len == 1024);
  CHECK(c.model.vocab_size == 50257);
  CHECK(c.data.format == "tokens");
  CHECK(c.data.train_tokens == std::vector<std::string>{"/d/train_*.bin", "/d/extra.bin"});
  CHECK(c.data.eval_tokens == std::vector<std::string>{"/d/val_00000[0-9].bin"});
  CHECK(c.origin.at("data.train_tokens") == p + ":6:5");  // where the list starts
  CHECK(c.run.sample_interval == 25);
  CHECK(c.sample.prompt == "Once upon");
  CHECK(c.sample.tokens == 7);
  CHECK(c.sample.temperature == 1.5);
  CHECK(c.sample.top_k == 0);
  CHECK(c.sample.seed == 9);
  Config s = load_config(p, {"data.train_tokens=[a.bin, \"b c.bin\"]"});
  CHECK(s.data.train_tokens == std::vector<std::string>{"a.bin", "b c.bin"});
}

TEST_CASE("gpt cross-key rules and list-of-strings errors", "[config]") {
  TempDir t;
  expect_error(t.write("a.yaml", "model:\n  type: gpt\n"), {},
               {"a.yaml:2:9: model.type: gpt needs data.format text or tokens (a token stream), not idx"});
  expect_error(t.write("b.yaml", "data:\n  format: text\n  text_files: [x.txt]\n"), {},
               {"b.yaml:2:11: data.format: text data is a token stream for model.type gpt, not mlp"});
  expect_error(t.write("c.yaml", "model: {type: gpt, n_head: 3, n_embd: 128}\ndata: {format: text, text_files: [x]}\n"), {},
               {"c.yaml:1:39: model.n_embd: must be a multiple of model.n_head (128 is not divisible by 3)"});
  expect_error(t.write("c2.yaml", "model: {type: gpt, n_head: 3}\ndata: {format: text, text_files: [x]}\n"), {},
               {"model.n_embd: must be a multiple of model.n_head (128 is not divisible by 3)"});
  expect_error(t.write("d.yaml", "model: {type: gpt}\ndata: {format: text}\n"), {},
               {"data.text_files: required when data.format is text"});
  expect_error(t.write("e.yaml", "model: {type: gpt}\ndata: {format: tokens}\n"), {},
               {"data.train_tokens: required when data.format is tokens"});
  expect_error(t.write("f.yaml", "model: {type: gpt}\ndata: {format: tokens, train_tokens: [a], eval_tokens: [b], eval_fraction: 0.1}\n"),
               {}, {"data.eval_fraction: give either data.eval_tokens or data.eval_fraction, not both"});
  expect_error(t.write("g.yaml", "model: {type: gpt}\ndata: {format: text, text_files: [a], normalize: global}\n"), {},
               {"data.normalize: normalizes features; text data are token ids: leave it none"});
  expect_error(t.write("h.yaml", "model: {type: gpt}\ndata: {format: text, text_files: [a]}\nsample: {prompt: \"\"}\n"), {},
               {"sample.prompt: must not be empty"});
  load_config(t.write("h2.yaml", "model: {type: gpt}\ndata: {format: text, text_files: [a]}\nsample: {prompt: \"\", tokens: 0}\n"), {});
  // Ranges.
  expect_error(t.write("r1.yaml", "model: {n_layer: 0}\n"), {}, {"model.n_layer: expected an integer in [1, 256], got \"0\""});
  expect_error(t.write("r2.yaml", "model: {n_head: 1025}\n"), {}, {"model.n_head: expected an integer in [1, 1024]"});
  expect_error(t.write("r3.yaml", "model: {seq_len: 65537}\n"), {}, {"model.seq_len: expected an integer in [1, 65536]"});
  expect_error(t.write("r4.yaml", "model: {vocab_size: -1}\n"), {}, {"model.vocab_size: expected an integer in [0, 16777216]"});
  expect_error(t.write("r5.yaml", "sample: {temperature: 0}\n"), {}, {"sample.temperature: expected a positive number, got \"0\""});
  expect_error(t.write("r6.yaml", "model: {type: llama}\n"), {}, {"model.type: expected one of mlp, gpt, got \"llama\""});
  expect_error(t.write("r7.yaml", "data: {format: txt}\n"), {},
               {"data.format: expected one of idx, csv, synthetic, text, tokens, got \"txt\" (did you mean \"text\"?)"});
  // Lists of strings: a list of non-empty scalars, errors at the item.
  expect_error(t.write("l1.yaml", "data:\n  text_files: a.txt\n"), {},
               {"l1.yaml:2:15: data.text_files: expected a list of strings (paths or glob patterns"});
  expect_error(t.write("l2.yaml", "data:\n  text_files: [a.txt, {b: 1}]\n"), {},
               {"l2.yaml:2:23: data.text_files[1]: expected a string (a path or glob pattern), got a mapping"});
  expect_error(t.write("l3.yaml", "data:\n  train_tokens:\n    - a.bin\n    - \"\"\n"), {},
               {"l3.yaml:4:7: data.train_tokens[1]: expected a path or glob pattern, got an empty string"});
  expect_error(t.write("l4.yaml", "data:\n  eval_tokens: [a, [b]]\n"), {}, {"data.eval_tokens[1]: expected a string", "got a list"});
  expect_error(t.write("ok.yaml", "run: {steps: 1}\n"), {"data.text_files=[*.txt]"}, {"--set data.text_files=[*.txt]", "malformed value"});
}

TEST_CASE("lists of strings and the prompt print and reload identically", "[config]") {
  TempDir t;
  const auto p = t.write("a.yaml",
                         "model: {type: gpt, n_embd: 96, n_head: 6}\n"
                         "data:\n  format: text\n  eval_fraction: 0.1\n"
                         "  text_files: [\"/x/*.txt\", \"/y/[ab]?\", \"quote\\\"d, comma\", \"tab\\there\", \"#hash\", \"123\", \"\\u00e9\"]\n"
                         "sample: {prompt: \"Line one\\nline \\\"two\\\"\\t\", top_k: 5}\n");
  Config c = load_config(p, {});
  REQUIRE(c.data.text_files.size() == 7);
  CHECK(c.data.text_files[2] == "quote\"d, comma");
  CHECK(c.data.text_files[3] == "tab\there");
  CHECK(c.data.text_files[6] == "\xC3\xA9");
  CHECK(c.sample.prompt == "Line one\nline \"two\"\t");
  const std::string text = amp::config_to_yaml(c);
  CHECK_THAT(text, Contains("  text_files: [\"/x/*.txt\", \"/y/[ab]?\", "));
  CHECK_THAT(text, Contains("\n  train_tokens: []\n  eval_tokens: []\n"));
  Config c2 = load_config(t.write("b.yaml", text), {});
  CHECK(amp::config_to_yaml(c2) == text);
  CHECK(amp::config_hash(c2) == amp::config_hash(c));
  CHECK(c2.data.text_files == c.data.text_files);
  CHECK(c2.sample.prompt == c.sample.prompt);
  CHECK(amp::config_hash(load_config(p, {"data.text_files=[\"/x/*.txt\"]"})) != amp::config_hash(c));
  // The default prompt, a newline, prints escaped and reloads as one.
  Config d = load_config(t.write("d.yaml", "run: {steps: 1}\n"), {});
  const std::string dtext = amp::config_to_yaml(d);
  CHECK_THAT(dtext, Contains("sample:\n  prompt: \"\\n\"\n  tokens: 200\n"));
  CHECK(load_config(t.write("e.yaml", dtext), {}).sample.prompt == "\n");
}

TEST_CASE("the new keys are appended: the existing printed keys keep their order", "[config]") {
  TempDir t;
  const std::string text = amp::config_to_yaml(load_config(t.write("a.yaml", "run: {steps: 1}\n"), {}));
  // Neighbours as printed before the new keys: each new key comes after the last old key of its section.
  CHECK_THAT(text, Contains("  progress: \"auto\"\n  sample_interval: 0\n  max_loss_vs_uniform: 4\n  eval_iters: 0\nmodel:\n  type: \"mlp\"\n  hidden: [1024, 1024]\n"));
  CHECK_THAT(text, Contains("  init_std: 0.01\n  n_layer: 2\n  n_head: 4\n  n_embd: 128\n  seq_len: 64\n  vocab_size: 0\n  vocab_pad: 0\n  init_from: \"\"\n  recompute: \"none\"\n  attention: \"explicit\"\ndata:\n"));
  CHECK_THAT(text, Contains("    noise: 0.1\n  text_files: []\n  train_tokens: []\n  eval_tokens: []\n  tokenizer: \"auto\"\nprecision:\n"));
  CHECK_THAT(text, Contains("  fail_setup: []\nsample:\n  prompt: \"\\n\"\n  tokens: 200\n  temperature: 0.8\n  top_k: 40\n  seed: 1\n"));
  CHECK_THAT(text, Contains("  top_k: 40\n  seed: 1\n  top_p: 1\n"));  // sample.top_p, appended
}

TEST_CASE("record-list keys: fault drills read, default, refuse and round-trip like any other key", "[config]") {
  TempDir t;
  const std::string good = t.write("good.yaml",
                                   "faults:\n"
                                   "  inject_nonfinite:\n"
                                   "    - {step: 3, tensor: fc1.bias}\n"
                                   "    - {step: 5, rank: 1, value: nan}\n"
                                   "  raise_signal: [{step: 7}]\n"
                                   "  fail_setup: [{rank: 2, phase: comm}]\n"
                                   "  corrupt_params: [{step: 4, rank: 1}]\n"
                                   "  await_signal: [{step: 6, rank: 1, timeout_s: 20}, {step: 6}]\n");
  const Config c = load_config(good, {});
  REQUIRE(c.faults.inject_nonfinite.size() == 2);
  CHECK(c.faults.inject_nonfinite[0].step == 3);
  CHECK(c.faults.inject_nonfinite[0].rank == 0);  // defaults
  CHECK(c.faults.inject_nonfinite[0].value == "inf");
  CHECK(c.faults.inject_nonfinite[0].tensor == "fc1.bias");
  CHECK(c.faults.inject_nonfinite[1].tensor == "");
  CHECK(c.faults.inject_nonfinite[1].value == "nan");
  CHECK(c.faults.raise_signal.at(0).value == "TERM");
  CHECK(c.faults.fail_setup.at(0).rank == 2);
  CHECK(c.faults.fail_setup.at(0).value == "comm");
  CHECK(c.faults.corrupt_params.at(0).rank == 1);
  REQUIRE(c.faults.await_signal.size() == 2);
  CHECK(c.faults.await_signal[0].step == 6);
  CHECK(c.faults.await_signal[0].rank == 1);
  CHECK(c.faults.await_signal[0].timeout_s == 20);
  CHECK(c.faults.await_signal[1].rank == 0);
  CHECK(c.faults.await_signal[1].timeout_s == 300);
  // Written back as the same records (the config a run saves, and its hash).
  const std::string text = amp::config_to_yaml(c);
  CHECK_THAT(text, Contains("inject_nonfinite: [{step: 3, rank: 0, tensor: \"fc1.bias\", value: inf}, "
                            "{step: 5, rank: 1, tensor: \"\", value: nan}]"));
  CHECK_THAT(text, Contains("raise_signal: [{step: 7, rank: 0, signal: TERM}]"));
  CHECK_THAT(text, Contains("fail_setup: [{rank: 2, phase: comm}]"));
  CHECK_THAT(text, Contains("corrupt_params: [{step: 4, rank: 1}]"));
  CHECK_THAT(text, Contains("await_signal: [{step: 6, rank: 1, timeout_s: 20}, {step: 6, rank: 0, timeout_s: 300}]"));
  const Config again = load_config(t.write("again.yaml", text), {});
  CHECK(amp::config_to_yaml(again) == text);

  // A bad field is an error at its FILE:LINE:COL naming KEY[i].FIELD and what it takes.
  expect_error(t.write("b1.yaml", "faults:\n  inject_nonfinite:\n    - {step: 3}\n    - {step: 0}\n"), {},
               {"b1.yaml:4:14: faults.inject_nonfinite[1].step: expected an integer", "got \"0\""});
  expect_error(t.write("b2.yaml", "faults:\n  raise_signal: [{step: 2, signal: KILL}]\n"), {},
               {"b2.yaml:2:36: faults.raise_signal[0].signal: expected TERM or USR1, got \"KILL\""});
  expect_error(t.write("b3.yaml", "faults:\n  fail_setup: [{rank: 0, phase: dat}]\n"), {},
               {"b3.yaml:2:33: faults.fail_setup[0].phase: expected backend, data, comm, resume or output"});
  expect_error(t.write("b4.yaml", "faults:\n  corrupt_params: [{step: 2, tensor: fc1.weight}]\n"), {},
               {"b4.yaml:2:30: faults.corrupt_params[0].tensor: unknown key"});
  expect_error(t.write("b5.yaml", "faults:\n  inject_nonfinite: [{stp: 2}]\n"), {},
               {"faults.inject_nonfinite[0].stp: unknown key (did you mean \"step\"?)"});
  expect_error(t.write("b6.yaml", "faults:\n  fail_setup: [{rank: 1}]\n"), {},
               {"b6.yaml:2:16: faults.fail_setup[0]: missing key \"phase\""});
  expect_error(t.write("b7.yaml", "faults:\n  inject_nonfinite: [{step: 2, tensor: [a]}]\n"), {},
               {"faults.inject_nonfinite[0].tensor: expected a tensor name, got a list"});
  expect_error(t.write("b8.yaml", "faults:\n  raise_signal: {step: 2}\n"), {},
               {"b8.yaml:2:17: faults.raise_signal: expected a list of {step, rank, signal}, got a mapping"});
  expect_error(t.write("b9.yaml", "run: {steps: 1}\n"), {"faults.inject_nonfinite=[{step: 1, rank: -1}]"},
               {"--set faults.inject_nonfinite=[{step: 1, rank: -1}]: faults.inject_nonfinite[0].rank: expected an integer"});
}
