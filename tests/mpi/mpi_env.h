// The MPI world shared by the MPI test cases (created in main).
#pragma once

#include "comm/mpi_communicator.h"

extern amp::MpiCommunicator* g_world;

inline amp::MpiCommunicator& world() { return *g_world; }

#include <unistd.h>

#include <string>

// An output folder of this job: rank 0's pid names it, so concurrent test jobs (ctest runs the
// np1/np2/np4 jobs in parallel) never share a run folder, which the trainer's lock would refuse.
inline std::string job_out_dir(const std::string& name) {
  int32_t pid = int32_t(::getpid());
  world().broadcast(amp::BufView{&pid, 1, amp::DType::I32}, 0);
  return "/tmp/amp_mpi_" + name + "_" + std::to_string(pid);
}
