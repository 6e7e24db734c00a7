// amp_ddp: `mpirun -np N amp_ddp CONFIG.yaml [--set key=value ...] [--dry-run]`.
// Parses the command line, starts MPI, loads the config on every rank (ranks agree on success
// before anything runs), then trains. Any error on any rank ends the whole job with its rank.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "config/config.h"
#include "core/error.h"
#include "backend/backend.h"
#include "train/run.h"

namespace {

struct CliOptions {
  std::string config;
  std::vector<std::string> sets;
  bool dry_run = false;
};

// Returns an exit code when the program should stop now (--help, --version, usage error), else -1.
int parse_cli(int argc, char** argv, CliOptions& opt) {
  CLI::App app{"amp_ddp: data-parallel mixed-precision training (FP16/BF16 compute, FP32 masters,\n"
               "loss scaling, one global overflow flag). Run under mpirun/srun for several ranks.",
               "amp_ddp"};
  app.add_option("config", opt.config, "YAML config file (see configs/)")->required();
  app.add_option("--set", opt.sets, "override a config key, e.g. --set optimizer.lr=3e-4 (repeatable)")
      ->type_name("KEY=VALUE")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_flag("--dry-run", opt.dry_run, "load, validate and print the resolved config, then exit");
  app.set_version_flag("--version", std::string("amp_ddp ") + AMP_VERSION + " (" + amp::build_info() + ")");
  app.footer("\n" + amp::config_keys_help());
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "usage error: %s\nRun 'amp_ddp --help' for the options and config keys.\n", e.what());
    return 2;
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  CliOptions cli;
  if (const int rc = parse_cli(argc, argv, cli); rc >= 0) return rc;

  std::unique_ptr<amp::MpiCommunicator> world;
  try {
    world = std::make_unique<amp::MpiCommunicator>(&argc, &argv);
  } catch (const amp::Error& e) {
    std::fprintf(stderr, "error: cannot start MPI: %s\n", e.what());
    return e.exit_code();
  }
  const int rank = world->rank();

  // Phase 1: the config. Every rank loads it; they agree on the outcome before going on, so a
  // config error ends every rank cleanly with the same exit code and one message.
  amp::Config cfg;
  int code = 0;
  std::string message;
  try {
    cfg = amp::load_config(cli.config, cli.sets);
  } catch (const amp::Error& e) {
    code = e.exit_code();
    message = e.what();
  }
  std::vector<int> codes(world->size());
  world->allgather(&code, codes.data(), sizeof(int));
  int first_bad = -1;
  for (int r = 0; r < world->size(); ++r)
    if (codes[r] != 0 && first_bad < 0) first_bad = r;
  if (first_bad >= 0) {
    if (rank == first_bad)
      std::fprintf(stderr, "%s%s\n", rank == 0 ? "" : ("[rank " + std::to_string(rank) + "] ").c_str(),
                   message.c_str());
    const int rc = codes[first_bad];
    world.reset();
    return rc;
  }
  if (cli.dry_run) {
    if (rank == 0) std::printf("# resolved config (%s)\n%s", cli.config.c_str(), amp::config_to_yaml(cfg).c_str());
    return 0;
  }

  // Phase 2: training. Errors end every rank at once.
  try {
    const int rc = amp::run(cfg, *world);
    world.reset();
    return rc;
  } catch (const amp::Error& e) {
    if (e.agreed()) {  // every rank stopped here and the message was printed once: exit cleanly
      if (rank == 0 && e.kind() == amp::ErrorKind::Divergence) std::fprintf(stderr, "error: %s\n", e.what());
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
