// Catch2 entry point for the MPI tests (and the GPU tests): every rank runs every test case in the
// same order (the cases call collectives), and the job fails if any rank saw a failure.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "mpi_env.h"
#include "tests/catch_runner.h"

amp::MpiCommunicator* g_world = nullptr;
std::string g_job_dir;

amp::Config config_from(const std::string& yaml, const std::vector<std::string>& sets) {
  const std::string path = rank_path("config.yaml");
  std::ofstream(path) << yaml;
  amp::Config c = amp::load_config(path, sets);
  std::remove(path.c_str());
  return c;
}

int main(int argc, char** argv) {
  amp::MpiCommunicator world(&argc, &argv);
  g_world = &world;
  int32_t pid = int32_t(::getpid());
  world.broadcast(amp::view_of(&pid, 1), 0);
  g_job_dir = (std::filesystem::temp_directory_path() / ("amp_tests_" + std::to_string(pid))).string();
  if (world.rank() == 0) std::filesystem::create_directories(g_job_dir);
  world.barrier();

  int any = amp_test::run_catch(argc, argv) ? 1 : 0;
  world.allreduce(amp::view_of(&any, 1), amp::ReduceOp::Max);  // every rank is past its last case
  std::error_code ignored;
  if (world.rank() == 0) std::filesystem::remove_all(g_job_dir, ignored);
  g_world = nullptr;
  return any;
}
