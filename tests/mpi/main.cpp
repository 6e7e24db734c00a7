// Catch2 entry point for the MPI tests (and the GPU tests): every rank runs every test case in the
// same order (the cases call collectives), and the job fails if any rank saw a failure.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "mpi_env.h"

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
