// amp_ddp: `mpirun -np N amp_ddp CONFIG.yaml [--set key=value ...] [--dry-run]`.
// Parses the command line, starts MPI, makes every rank agree on what to do (an MPMD launch may
// give ranks different command lines), loads the config on every rank (agreed before anything
// runs), then trains. Any error on any rank ends the whole job with its rank.
// `amp_ddp sample CHECKPOINT [options]` generates text from a checkpoint;
// `amp_ddp export CHECKPOINT --format F -o FILE` writes its weights for other programs;
// `amp_ddp prepare FILES... -o DIR` turns text into token shards: each in one process, with MPI
// only where a launcher started it (to end a job of several ranks with a message).
// `amp_ddp eval CONFIG` runs as training does (N ranks, the config agreed) but evaluates weights
// instead of training.
#include <CLI/CLI.hpp>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/agree.h"
#include "comm/mpi_communicator.h"
#include "comm/startup_deadline.h"
#include "config/config.h"
#include "core/error.h"
#include "train/dry_run.h"
#include "train/eval_command.h"
#include "train/export_command.h"
#include "train/prepare_command.h"
#include "train/run.h"
#include "train/sample_command.h"
#include "train/signals.h"

namespace {

// An option's integer in [lo, hi]. CLI11's Range answers "not in range" for text that is no number
// at all (--threads abc); this says what was expected and what came.
CLI::Validator integer_in(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) {
        int64_t x = 0;
        const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
        const bool ok = ec == std::errc() && end == v.data() + v.size() && x >= lo && x <= hi;
        return ok ? std::string() : amp::strcat("expected an integer in [", lo, ", ", hi, "], got \"", v, "\"");
      },
      amp::strcat("INT in [", lo, ", ", hi, "]"));
}

// An option's number for which ok() holds; `what` says which ("a number > 0").
CLI::Validator number_where(bool (*ok)(double), const std::string& what) {
  return CLI::Validator(
      [ok, what](std::string& v) {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        return !v.empty() && end && *end == '\0' && ok(x) ? std::string()
                                                           : amp::strcat("expected ", what, ", got \"", v, "\"");
      },
      "NUMBER");
}

// An option's text that must not be empty; `why` is the message when it is.
CLI::Validator non_empty(const std::string& why, const char* type) {
  return CLI::Validator([why](std::string& v) { return v.empty() ? why : std::string(); }, type);
}

// What this rank's command line asks for. Ranks compare it before anything else runs.
// Sample, Export and Prepare are one-process subcommands: they meet the other ranks only when a
// launcher started them as ranks of a job (to end it with a clear message, not a hang).
enum class Action : int { Train = 0, DryRun = 1, Help = 2, Version = 3, UsageError = 4, Eval = 5, Sample = 6, Export = 7, Prepare = 8 };

const char* action_name(Action a) {
  switch (a) {
    case Action::Train: return "train";
    case Action::DryRun: return "--dry-run";
    case Action::Help: return "--help";
    case Action::Version: return "--version";
    case Action::UsageError: return "a usage error";
    case Action::Eval: return "eval";
    case Action::Sample: return "sample";
    case Action::Export: return "export";
    case Action::Prepare: return "prepare";
  }
  return "?";
}

struct Cli {
  std::string config;
  std::vector<std::string> sets;
  bool dry_run = false;
  int plan_ranks = 0;  // --ranks: the world size --dry-run plans for (0: the job's)
  Action action = Action::Train;
  std::string text;  // what to print for Help, Version and UsageError
};

// Parses without printing: the caller decides which rank prints. eval: `amp_ddp eval CONFIG ...`
// (argv starts after "eval").
Cli parse_cli(int argc, char** argv, bool eval) {
  Cli cli;
  CLI::App eval_app{"amp_ddp eval: the evaluation loss (and perplexity) of weights on the config's evaluation set,\n"
                    "on every rank of the job, without training or writing anything:\n"
                    "  mpirun -np N amp_ddp eval CONFIG --set model.init_from=CHECKPOINT_OR_WEIGHTS\n"
                    "run.eval_iters bounds the batches per rank; precision.compute is the forward's precision.",
                    "amp_ddp eval"};
  CLI::App train_app{"amp_ddp: data-parallel mixed-precision training (FP16/BF16 compute, FP32 masters,\n"
               "loss scaling, one global overflow flag). Run under mpirun/srun for several ranks.\n"
               "amp_ddp sample CHECKPOINT: text from a trained GPT (amp_ddp sample --help).\n"
               "amp_ddp export CHECKPOINT --format safetensors|llmc -o FILE: its weights (amp_ddp export --help).\n"
               "amp_ddp prepare FILES... -o DIR: text -> token shards (amp_ddp prepare --help).\n"
               "amp_ddp eval CONFIG --set model.init_from=WEIGHTS: their evaluation loss (amp_ddp eval --help).",
               "amp_ddp"};
  CLI::App& app = eval ? eval_app : train_app;
  app.add_option("config", cli.config, "YAML config file (see configs/)")->required();
  app.add_option("--set", cli.sets, "override a config key, e.g. --set optimizer.lr=3e-4 (repeatable)")
      ->type_name("KEY=VALUE")
      ->expected(1)
      ->allow_extra_args(false)  // one value per --set: a following positional is the config
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  CLI::Option* dry = app.add_flag("--dry-run", cli.dry_run,
                                  "load, validate and print the resolved config and the memory plan, then exit");
  app.add_option("--ranks", cli.plan_ranks, "with --dry-run: plan for this many ranks (default: the job's)")
      ->check(integer_in(1, 1 << 20))
      ->needs(dry);
  // Asked only when printed: in a CUDA build it loads the CUDA backend to say which it is.
  app.set_version_flag("--version", [] { return std::string("amp_ddp ") + AMP_VERSION + " (" + amp::build_info() + ")"; });
  app.footer("\n" + amp::config_keys_help());
  std::ostringstream out, err;
  try {
    app.parse(argc, argv);
    cli.action = cli.dry_run ? Action::DryRun : eval ? Action::Eval : Action::Train;
  } catch (const CLI::CallForHelp& e) {
    app.exit(e, out, err);
    cli.action = Action::Help;
    cli.text = out.str();
  } catch (const CLI::CallForVersion& e) {
    app.exit(e, out, err);
    cli.action = Action::Version;
    cli.text = out.str();
  } catch (const CLI::ParseError& e) {
    cli.action = Action::UsageError;
    cli.text = std::string("usage error: ") + e.what() + "\nRun '" + app.get_name() + " --help' for the options and config keys.\n";
  }
  return cli;
}

// The exit code of an action that ends the program before training (-1: go on).
int finish_without_training(const Cli& cli) {
  switch (cli.action) {
    case Action::Help:
    case Action::Version: std::fputs(cli.text.c_str(), stdout); return 0;
    case Action::UsageError: std::fputs(cli.text.c_str(), stderr); return 2;
    default: return -1;
  }
}

// True when a launcher started this process as one rank of a job: then every other rank waits
// for it inside MPI_Init, so it must initialize MPI even to print --help.
bool launched_as_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(v)) return true;
  return false;
}

// Every rank must have been asked the same thing. Returns an exit code when the job ends here.
int agree_on_action(amp::MpiCommunicator& world, const Cli& cli) {
  // A usage error on any rank ends every rank, agreed like every set-up error (its rank prints it).
  try {
    amp::run_agreed(world, [&] {
      if (cli.action != Action::UsageError) return;
      std::string text = cli.text;
      while (!text.empty() && text.back() == '\n') text.pop_back();
      throw amp::Error(amp::ErrorKind::Config, text);
    });
  } catch (const amp::Error& e) {
    return e.exit_code();
  }
  const int mine = int(cli.action);
  std::vector<int> all(size_t(world.size()));
  world.allgather(&mine, all.data(), sizeof mine);
  bool same = true;
  for (int r = 0; r < world.size(); ++r) same = same && all[size_t(r)] == all[0];
  if (!same) {
    if (world.rank() == 0) {
      std::string list;
      for (int r = 0; r < world.size(); ++r)
        list += (r ? ", " : "") + std::string("rank ") + std::to_string(r) + ": " + action_name(Action(all[size_t(r)]));
      std::fprintf(stderr,
                   "usage error: the ranks were started with different command lines (%s); give every rank the "
                   "same arguments\n",
                   list.c_str());
    }
    return 2;
  }
  if (cli.action == Action::Help || cli.action == Action::Version) {
    if (world.rank() == 0) std::fputs(cli.text.c_str(), stdout);
    return 0;
  }
  return -1;
}

// Starts MPI as one rank of the job and agrees with the other ranks on what to do. Returns an exit
// code when this rank's part ends here (a failed start, a disagreement, --help), else -1 with
// `world` up.
int join_job(int& argc, char**& argv, const Cli& cli, std::unique_ptr<amp::MpiCommunicator>& world) {
  try {
    // MPI_Init waits for every rank of the job: a rank stopped before it would hold the others
    // there forever (the collective watchdog starts only once MPI is up).
    amp::StartupDeadline deadline(amp::StartupDeadline::seconds_from_env(amp::kDefaultTimeoutSeconds),
                                  "MPI initialization (every rank of the job meeting in MPI_Init)");
    world = std::make_unique<amp::MpiCommunicator>(&argc, &argv);
  } catch (const amp::Error& e) {
    std::fprintf(stderr, "error: cannot start MPI: %s\n", e.what());
    return e.exit_code();
  }
  // Until the config says otherwise, a collective that waits this long for a rank ends the job.
  world->start_watchdog(amp::kDefaultTimeoutSeconds);
  if (const int rc = agree_on_action(*world, cli); rc >= 0) {
    world.reset();
    return rc;
  }
  return -1;
}

// A one-process subcommand started by a launcher (mpirun, srun): the job's other ranks wait for it
// in MPI_Init, so it joins them to end the job with a message (a job of other command lines, or of
// several copies of this one) instead of leaving them to the launcher's. Returns an exit code, or
// -1 to run alone (a job of one process).
int one_process_in_job(int& argc, char**& argv, Action action) {
  Cli cli;
  cli.action = action;
  std::unique_ptr<amp::MpiCommunicator> world;
  if (const int rc = join_job(argc, argv, cli, world); rc >= 0) return rc;
  const int size = world->size();
  if (size > 1 && world->rank() == 0)
    std::fprintf(stderr,
                 "usage error: amp_ddp %s runs in one process, and this job started it as %d ranks; run it without "
                 "mpirun or srun, or as one task\n",
                 action_name(action), size);
  world.reset();
  return size > 1 ? 2 : -1;
}

// A one-process subcommand (sample, export): parses argv with app (usage errors exit 2, --help
// prints and exits 0), then runs `run`, whose amp::Error exits with its kind's code.
int run_subcommand(CLI::App& app, int argc, char** argv, const std::function<void()>& run) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {
      std::fputs(app.help().c_str(), stdout);
      return 0;
    }
    std::fprintf(stderr, "usage error: %s\nRun '%s --help' for the options.\n", e.what(), app.get_name().c_str());
    return 2;
  }
  try {
    run();
    return 0;
  } catch (const amp::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 1;
  }
}

// `amp_ddp sample CHECKPOINT ...`: one process; usage errors exit 2, amp errors their code.
int sample_main(int argc, char** argv) {
  CLI::App app{"amp_ddp sample: text from a trained language model's checkpoint (no training data needed).\n"
               "Options default to the checkpoint's sample.* settings, so the sample of a run's final\n"
               "checkpoint with them is the run's final sample.",
               "amp_ddp sample"};
  amp::SampleRequest r;
  std::string prompt;
  int64_t tokens = 0, top_k = 0, seed = 0;
  double temperature = 0, top_p = 1;
  app.add_option("checkpoint", r.checkpoint, "a checkpoint of a model.type gpt run")->required();
  auto* o_prompt = app.add_option("--prompt", prompt, "the text the sample continues (token ids separated by spaces where the data named no tokenizer)")
                      ->check(non_empty("expected text: an empty prompt has no token to start from "
                                        "(sample.prompt must not be empty either)",
                                        "TEXT"));
  auto* o_tokens = app.add_option("--tokens", tokens, "tokens to generate")->check(integer_in(1, int64_t(1) << 20));
  auto* o_temp = app.add_option("--temperature", temperature, "sampling temperature (> 0)")
                     ->check(number_where([](double x) { return x > 0 && x <= double(std::numeric_limits<float>::max()); },
                                          "a number > 0, at most 3.4e38 (sample.temperature's range)"));
  auto* o_topk = app.add_option("--top-k", top_k, "sample among the k likeliest tokens (0: all)")
                     ->check(integer_in(0, int64_t(1) << 24));
  auto* o_topp = app.add_option("--top-p", top_p,
                                "nucleus sampling: among the fewest likeliest tokens whose probabilities sum to p (1: all)")
                     ->check(number_where([](double x) { return x > 0 && x <= 1; }, "a number in (0, 1]"));
  auto* o_seed = app.add_option("--seed", seed, "sampling seed (sample i draws with seed + i)")
                     ->check(integer_in(0, int64_t(9e15)));  // sample.seed's range
  app.add_option("--samples", r.samples, "samples to draw, separated by a line of dashes")
      ->check(integer_in(1, int64_t(1) << 20));
  app.add_option("--device", r.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--threads", r.threads, "CPU threads (0: every CPU)")->check(integer_in(0, 1024));
  return run_subcommand(app, argc, argv, [&] {
    if (*o_prompt) r.prompt = prompt;
    if (*o_tokens) r.tokens = tokens;
    if (*o_temp) r.temperature = temperature;
    if (*o_topk) r.top_k = top_k;
    if (*o_topp) r.top_p = top_p;
    if (*o_seed) r.seed = seed;
    amp::run_sample(r);
  });
}

// `amp_ddp export CHECKPOINT --format safetensors|llmc -o FILE`: one process.
int export_main(int argc, char** argv) {
  CLI::App app{"amp_ddp export: a GPT checkpoint's FP32 weights as a safetensors file (Hugging Face GPT-2\n"
               "names) or an llm.c model file; both load back with model.init_from.",
               "amp_ddp export"};
  std::string checkpoint, format, out;
  app.add_option("checkpoint", checkpoint, "a checkpoint of a model.type gpt run")->required();
  app.add_option("--format", format, "safetensors or llmc")->required()->check(CLI::IsMember({"safetensors", "llmc"}));
  app.add_option("-o,--output", out, "the file to write (must not exist)")
      ->required()
      ->check(non_empty("expected a file path, got \"\"", "FILE"));
  return run_subcommand(app, argc, argv, [&] {
    amp::run_export(checkpoint, format == "llmc" ? amp::WeightFormat::Llmc : amp::WeightFormat::Safetensors, out);
  });
}

// `amp_ddp prepare FILES... -o DIR`: text -> llm.c token shards, one process.
int prepare_main(int argc, char** argv) {
  CLI::App app{"amp_ddp prepare: text files -> llm.c token shards (uint16, version 1) for data.format tokens:\n"
               "DIR/NAME_val_000000.bin (the first --val-fraction of the input), DIR/NAME_train_000000.bin, ...\n"
               "and DIR/NAME_info.json. With GPT-2's tokenizer every document starts with <|endoftext|>.",
               "amp_ddp prepare"};
  amp::PrepareOptions o;
  bool quiet = false;
  app.add_option("inputs", o.inputs, "text files or glob patterns, in order")->required();
  app.add_option("-o,--output", o.out_dir, "the folder for the shards (made when missing)")
      ->required()
      ->check(non_empty("expected a folder path, got \"\"", "DIR"));
  app.add_option("--tokenizer", o.tokenizer, "gpt2 (GPT-2's BPE) or bytes")->capture_default_str()->check(CLI::IsMember({"gpt2", "bytes"}));
  app.add_option("--doc-separator", o.doc_separator,
                 "a line that separates documents inside a file (% for fortune files; default: one document per file)");
  app.add_option("--val-fraction", o.val_fraction, "the share of the input (by bytes, from its start) for validation")->capture_default_str()
      ->check(number_where([](double x) { return x >= 0 && x < 1; }, "a number in [0, 1)"));
  app.add_option("--shard-tokens", o.shard_tokens, "tokens per shard at most")->capture_default_str()->check(integer_in(1, INT32_MAX));
  app.add_option("--name", o.name, "the shards' file name prefix")->capture_default_str();
  app.add_option("--threads", o.threads, "encoding threads (0: every CPU)")->check(integer_in(0, 1024));
  app.add_flag("-q,--quiet", quiet, "no progress bar");
  return run_subcommand(app, argc, argv, [&] { amp::run_prepare(o, quiet); });
}

}  // namespace

int main(int argc, char** argv) {
  const std::string sub = argc > 1 ? argv[1] : "";
  const Action one_process = sub == "prepare" ? Action::Prepare
                             : sub == "export" ? Action::Export
                             : sub == "sample" ? Action::Sample
                                               : Action::Train;
  if (one_process != Action::Train && launched_as_rank())
    if (const int rc = one_process_in_job(argc, argv, one_process); rc >= 0) return rc;
  if (one_process == Action::Prepare) return prepare_main(argc - 1, argv + 1);
  if (one_process == Action::Export) return export_main(argc - 1, argv + 1);
  if (one_process == Action::Sample) return sample_main(argc - 1, argv + 1);  // Ctrl-C stops it
  amp::block_stop_signals();  // before any thread exists: no handler ever runs inside library code
  const bool eval = argc > 1 && std::string(argv[1]) == "eval";
  const Cli cli = eval ? parse_cli(argc - 1, argv + 1, true) : parse_cli(argc, argv, false);
  if (!launched_as_rank())
    if (const int rc = finish_without_training(cli); rc >= 0) return rc;

  std::unique_ptr<amp::MpiCommunicator> world;
  if (const int rc = join_job(argc, argv, cli, world); rc >= 0) return rc;
  const int rank = world->rank();

  try {
    // The config: every rank loads it; they agree on the outcome before going on, so a config
    // error ends every rank cleanly with the same exit code and one message.
    amp::Config cfg;
    amp::run_agreed(*world, [&] { cfg = amp::load_config(cli.config, cli.sets); });
    world->start_watchdog(cfg.distributed.timeout_s);
    if (cli.dry_run) {
      if (rank == 0)
        std::printf("# resolved config (%s)\n%s%s", cli.config.c_str(), amp::config_to_yaml(cfg).c_str(),
                    amp::dry_run_plan(cfg, cli.plan_ranks > 0 ? cli.plan_ranks : world->size()).c_str());
      world.reset();
      return 0;
    }
    const int rc = cli.action == Action::Eval ? amp::run_eval(cfg, *world) : amp::run(cfg, *world);
    world.reset();
    return rc;
  } catch (const amp::Error& e) {
    if (e.agreed()) {  // every rank stopped here: print once (unless done) and exit cleanly
      if (rank == 0 && !e.reported()) std::fprintf(stderr, "%s\n", e.what());
      std::fflush(stderr);
      const int rc = e.exit_code();
      world.reset();
      return rc;
    }
    std::fprintf(stderr, "[rank %d] %s\n", rank, e.what());
    std::fflush(stderr);
    world->abort(e.exit_code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] internal error: %s\n", rank, e.what());
    std::fflush(stderr);
    world->abort(1);
  }
}
