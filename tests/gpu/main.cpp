// Catch2 entry point of the GPU tests: every case is hidden ([.cuda]), so running the binary with
// no arguments runs nothing; `amp_gpu_tests "[.cuda]"` runs them all. MPI is initialized for the
// cases that need a world (the trainer and the NCCL communicator).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "comm/mpi_communicator.h"

amp::MpiCommunicator* g_world = nullptr;

int main(int argc, char** argv) {
  amp::MpiCommunicator world(&argc, &argv);
  g_world = &world;
  Catch::Session session;
  if (int rc = session.applyCommandLine(argc, argv)) return rc;
  int failed = session.run();
  int any = failed ? 1 : 0;
  world.allreduce(amp::view_of(&any, 1), amp::ReduceOp::Max);
  g_world = nullptr;
  return any;
}
