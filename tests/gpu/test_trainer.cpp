// End to end: the trainer on a small synthetic problem, once on the CPU backend and once on the
// device (the CUDA backend; the CPU again on the stand-in). Loss curves and weights agree within a
// tolerance; skip decisions (forced by faults.inject_nonfinite) and the scale sequence agree
// exactly; the graph-captured run too. A run resumed from a checkpoint captures its own graph and
// continues bit for bit. On 2 ranks, distributed.zero 2 on the device equals zero 0 bit for bit.
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "device_env.h"
#include "train/trainer.h"

using namespace amp;
using namespace gpu_test;

namespace {

struct Curve {
  std::vector<double> loss_sum;
  std::vector<float> scale;
  std::vector<int64_t> skipped;
  std::vector<int32_t> any;
  std::vector<int32_t> correct;
  std::vector<float> master;
};

Curve train(const Config& cfg) {
  Curve c;
  Trainer t(cfg, world());
  t.set_step_observer([&](int64_t, const Trainer::StepObservation& s, const std::vector<int32_t>& flags) {
    c.loss_sum.push_back(s.loss_sum);
    c.scale.push_back(s.scaler.scale);
    c.skipped.push_back(s.scaler.overflow_steps);
    c.any.push_back(flags[OverflowFlags::kAny]);
    c.correct.push_back(s.correct);
  });
  REQUIRE(t.run() == 0);
  c.master = t.master_weights();
  return c;
}

// Text of `letters` random lowercase letters in words of nine, the same for a seed.
void write_words(const std::string& path, uint64_t seed, int letters) {
  std::ofstream f(path);
  Rng r(seed);
  for (int i = 0; i < letters; ++i) f << char('a' + r.next_u64() % 26) << (i % 9 == 8 ? " " : "");
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

void compare_runs(const Curve& g, const Curve& c, double tol) {
  REQUIRE(g.loss_sum.size() == c.loss_sum.size());
  CHECK(g.skipped == c.skipped);
  CHECK(g.scale == c.scale);
  CHECK(g.any == c.any);
  for (size_t i = 0; i < c.loss_sum.size(); ++i) {
    INFO("step " << i + 1 << " cumulative loss gpu " << g.loss_sum[i] << " cpu " << c.loss_sum[i]);
    if (std::isfinite(c.loss_sum[i])) CHECK(std::fabs(g.loss_sum[i] - c.loss_sum[i]) <= tol * std::fabs(c.loss_sum[i]));
  }
  REQUIRE(g.master.size() == c.master.size());
  const double e = rel_l2(g.master, c.master);
  INFO("relative L2 difference of the master weights " << e);
  CHECK(e < tol);
}

}  // namespace

TEST_CASE("trainer: CPU and CUDA runs agree, with identical forced skips (fp16, MSE)", "[.cuda][trainer]") {
  const std::string yaml =
      "run: {name: gpu_e2e, steps: 40, log_interval: 1000, progress: off, threads: 2, out_dir: " + rank_path("out") +
      "}\n"
      "model: {hidden: [64, 32]}\n"
      "data: {format: synthetic, batch_size: 32, synthetic: {train_samples: 1024, eval_samples: 64, features: 24, "
      "outputs: 3}}\n"
      "precision: {compute: fp16, loss_scale: {mode: dynamic, init_scale: 1024, growth_interval: 1000}}\n"
      "optimizer: {type: adamw, lr: 0.001, weight_decay: 0.01, grad_clip: 5.0}\n"
      "checkpoint: {final: false}\n"
      "faults:\n  inject_nonfinite:\n"
      "    - {step: 5, rank: 0, tensor: fc2.weight}\n"
      "    - {step: 13, rank: 0, tensor: fc3.bias, value: nan}\n";
  const Curve cpu = train(config_from(yaml, {"run.device=cpu"}));
  const Curve gpu = train(config_from(yaml, {std::string("run.device=") + device_name()}));
  CHECK(cpu.skipped.back() == 2);
  compare_runs(gpu, cpu, 3e-2);
}

TEST_CASE("trainer: a graph-captured CUDA run agrees with the CPU (bf16, softmax, CSV data)", "[.cuda][trainer]") {
  const std::string csv = rank_path("train.csv");
  {
    std::ofstream f(csv);
    const size_t features = 20, classes = 4, rows = 600;
    for (size_t j = 0; j < features; ++j) f << "f" << j << ",";
    f << "label\n";
    const std::vector<float> proj = randn(features * classes, 3);
    Rng r(9);
    for (size_t i = 0; i < rows; ++i) {
      std::vector<float> x(features);
      for (auto& v : x) v = float(r.normal());
      size_t best = 0;
      double best_v = -1e30;
      for (size_t k = 0; k < classes; ++k) {
        double s = 0;
        for (size_t j = 0; j < features; ++j) s += double(proj[k * features + j]) * x[j];
        if (s > best_v) best_v = s, best = k;
      }
      for (float v : x) f << v << ",";
      f << best << "\n";
    }
  }
  const std::string yaml =
      "run: {name: gpu_e2e_graph, steps: 36, log_interval: 1000, progress: off, threads: 2, cuda_graph: true, "
      "out_dir: " + rank_path("out2") + "}\n"
      "model: {hidden: [48], activation: gelu}\n"
      "data: {format: csv, train_csv: " + csv + ", task: classification, batch_size: 50}\n"
      "precision: {compute: bf16}\n"
      "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n"
      "checkpoint: {final: false}\n";
  const Curve cpu = train(config_from(yaml, {"run.device=cpu"}));
  const Curve gpu = train(config_from(yaml, {std::string("run.device=") + device_name()}));
  std::remove(csv.c_str());
  compare_runs(gpu, cpu, 5e-2);  // bf16: one rounding is 0.4%, and trajectories drift apart
  // Hits agree up to the few samples whose arg-max is within rounding of a tie.
  for (size_t i = 0; i < cpu.correct.size(); ++i) CHECK(std::abs(gpu.correct[i] - cpu.correct[i]) <= 2 + int(i) / 4);
}

TEST_CASE("trainer: a resumed CUDA run captures its graph too and continues bit for bit", "[.cuda][trainer]") {
  // The trainer captures the third step of the process: step 3 of a fresh run, step 13 of a run
  // resumed after step 10. Both replay the same kernels, so the resumed run must end with the
  // uninterrupted run's bits. Every run logs every 5 steps: a run's last step always logs (which
  // clears the interval's loss sums), so the uninterrupted run must log at step 10 too for the
  // observed sums to agree.
  const std::string yaml =
      "run: {name: gpu_resume, device: " + std::string(device_name()) + ", steps: 24, log_interval: 5, progress: off, threads: 2}\n"
      "model: {hidden: [64, 48]}\n"
      "data: {format: synthetic, batch_size: 32, synthetic: {train_samples: 1024, eval_samples: 64, features: 24, "
      "outputs: 3}}\n"
      "precision: {compute: fp16, loss_scale: {mode: dynamic, init_scale: 1024, growth_interval: 4}}\n"
      "optimizer: {type: adamw, lr: 0.001, weight_decay: 0.01}\n"
      "checkpoint: {final: false}\n";
  const std::string whole = rank_path("resume_whole"), split = rank_path("resume_split");
  const Curve full = train(config_from(yaml, {"run.out_dir=" + whole}));
  // The same run stopped after step 10 (its checkpoint), then resumed to step 24.
  const Curve first = train(config_from(yaml, {"run.out_dir=" + split, "run.steps=10", "checkpoint.final=true"}));
  const Curve rest = train(config_from(yaml, {"run.out_dir=" + split, "checkpoint.resume=auto"}));
  REQUIRE(first.loss_sum.size() == 10);
  REQUIRE(rest.loss_sum.size() == 14);
  for (size_t i = 0; i < 14; ++i) {
    INFO("step " << i + 11);
    CHECK(rest.loss_sum[i] == full.loss_sum[i + 10]);
    CHECK(rest.scale[i] == full.scale[i + 10]);
  }
  CHECK(rest.master == full.master);
  std::filesystem::remove_all(whole);
  std::filesystem::remove_all(split);
}

TEST_CASE("trainer: weight decay reaches the matrices and embeddings only, or every tensor with decay all",
          "[.cuda][trainer]") {
  // One step from the same initial weights and batch: the gradients are those of the initial
  // weights w0 whatever the decay, and AdamW's decoupled decay scales w0 by 1 - lr * weight_decay
  // before the update. So a tensor the decay leaves alone ends bit for bit as in the run without
  // decay, and a decayed one ends lower by lr * weight_decay * w0: twice as much with twice the
  // weight decay, 0.01 for the layer norms' gains (w0 = 1) under decay all with lr 0.01, 0 for
  // the biases (w0 = 0).
  const std::string text = rank_path("decay.txt");
  write_words(text, 21, 20000);
  const std::string yaml =
      "run: {name: gpu_decay, device: " + std::string(device_name()) +
      ", steps: 1, log_interval: 1, progress: off, threads: 2, eval_interval: 0, sample_interval: 0}\n"
      "model: {type: gpt, n_layer: 2, n_head: 2, n_embd: 32, seq_len: 16}\n"
      "data: {format: text, text_files: [" + text + "], batch_size: 4}\n"
      "precision: {compute: fp32}\n"
      "optimizer: {type: adamw, lr: 0.01}\n"
      "checkpoint: {final: false}\n";
  const std::string out = rank_path("decay_out");
  ParamLayout layout;
  auto run = [&](const std::vector<std::string>& sets) {
    std::vector<std::string> all = sets;
    all.push_back("run.out_dir=" + out);
    const Config cfg = config_from(yaml, all);  // the trainer keeps a reference
    Trainer t(cfg, world());
    REQUIRE(t.run() == 0);
    layout = t.layout();
    std::vector<float> w = t.master_weights();
    std::filesystem::remove_all(out);
    return w;
  };
  const std::vector<float> none = run({"optimizer.weight_decay=0"});
  const std::vector<float> half = run({"optimizer.weight_decay=0.5"});  // optimizer.decay: matrices (default)
  const std::vector<float> all = run({"optimizer.weight_decay=1", "optimizer.decay=all"});
  std::remove(text.c_str());
  size_t decayed = 0, elements = 0;
  for (const ParamInfo& p : layout.tensors) {
    INFO(p.name);
    const bool bias = p.name.find(".bias") != std::string::npos;
    const bool gain = p.name.find("ln_") != std::string::npos && !bias;
    const bool matrix = !bias && !gain;
    CHECK(p.decay == matrix);
    for (size_t i = p.span.offset; i < p.span.offset + p.span.count; ++i) {
      const double d_half = double(none[i]) - half[i], d_all = double(none[i]) - all[i];
      ++elements;
      if (matrix) {
        REQUIRE(std::fabs(d_all - 2 * d_half) <= 1e-4 * std::fabs(d_all) + 1e-8);
        decayed += d_half != 0;
      } else {
        REQUIRE(half[i] == none[i]);  // untouched, bit for bit
        if (bias) REQUIRE(all[i] == none[i]);
        if (gain) REQUIRE(std::fabs(d_all - 0.01) <= 1e-6);
      }
    }
  }
  CHECK(decayed > elements / 2);  // the matrices and embeddings hold most elements; w0 = 0 only by chance
}

TEST_CASE("trainer: distributed.zero 2 on the device returns gradient pages and equals zero 0 bit for bit (2 ranks)",
          "[.cuda][comm][zero]") {
  if (world().size() < 2) {
    WARN("one rank: distributed.zero 2 has nothing to shard (this case runs on 2 ranks)");
    return;
  }
  // A GPT whose 16-bit gradients (25 MB) are larger than stage 2's window, buckets of 2 MiB; random text,
  // the same on every rank, in a folder named by rank 0.
  const std::string base = job_out_dir("zero2");
  if (world().rank() == 0) {
    std::filesystem::create_directories(base);
    write_words(base + "/text.txt", 7, 1 << 16);
  }
  world().barrier();
  const std::string yaml =
      "run: {steps: 4, log_interval: 1000, eval_interval: 0, progress: off, threads: 1}\n"
      "model: {type: gpt, n_layer: 4, n_head: 4, n_embd: 512, seq_len: 32}\n"
      "data: {format: text, text_files: [" + base + "/text.txt], batch_size: 2}\n"
      "precision: {compute: fp16, loss_scale: {mode: dynamic, init_scale: 1024}}\n"
      "optimizer: {type: adamw, lr: 0.001, grad_clip: 0.5}\n"
      "sample: {tokens: 0}\n"
      "checkpoint: {final: false}\n"
      "distributed: {bucket_mb: 2, first_bucket_mb: 0.5}\n";
  const std::string dev = std::string("run.device=") + device_name();
  for (const char* overlap : {"off", "on"}) {
    INFO("distributed.overlap " << overlap);
    const std::vector<std::string> sets = {dev, std::string("distributed.overlap=") + overlap};
    auto with = [&](const char* zero) {
      std::vector<std::string> s = sets;
      s.push_back(std::string("distributed.zero=") + zero);
      s.push_back("run.out_dir=" + base + "/zero" + zero + "_" + overlap);
      return config_from(yaml, s);
    };
    const Curve z0 = train(with("0"));
    const Curve z2 = train(with("2"));
    CHECK(z2.loss_sum == z0.loss_sum);
    CHECK(z2.scale == z0.scale);
    CHECK(z2.skipped == z0.skipped);
    CHECK(z2.master == z0.master);  // bit for bit
    // Rank 0 measured its gradient buffer holding at most the counted window, less than the buffer.
    if (world().rank() == 0) {
      std::ifstream f(base + "/zero2_" + overlap + "/summary.json");
      const nlohmann::json j = nlohmann::json::parse(f);
      REQUIRE(j.contains("zero2_gradient_buffer_rank0"));
      const auto& w = j["zero2_gradient_buffer_rank0"];
      const size_t counted = w["counted"].get<size_t>(), peak = w.value("measured_peak", size_t(0));
      const size_t buffer = j["state_bytes_per_rank"]["working_copy"].get<size_t>();  // as large as the gradients
      INFO("buffer " << buffer << " bytes, window counted " << counted << ", measured peak " << peak);
      CHECK(counted < buffer);
      CHECK(peak > 0);
      CHECK(peak <= counted);
    }
  }
}
