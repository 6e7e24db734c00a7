// What the MPI test cases and the device test cases share, all made in main: the MPI world, and a
// folder of this job for the files the cases write.
#pragma once

#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "config/config.h"

extern amp::MpiCommunicator* g_world;
// TMPDIR/amp_tests_<rank 0's pid>: concurrent test jobs (ctest runs the np1/np2/np4 jobs and the
// device cases in parallel) never share a run folder, which the trainer's lock would refuse. main
// makes it before the first case and removes it after the last: a job leaves nothing behind.
extern std::string g_job_dir;

inline amp::MpiCommunicator& world() { return *g_world; }

// An output folder the job's ranks share.
inline std::string job_out_dir(const std::string& name) { return g_job_dir + "/" + name; }

// A path of this rank's own in the job's folder (a config file, a folder per rank).
inline std::string rank_path(const std::string& name) {
  return g_job_dir + "/rank" + std::to_string(world().rank()) + "_" + name;
}

// The YAML, written to a file of this rank and loaded (ranks resolve identical configs).
amp::Config config_from(const std::string& yaml, const std::vector<std::string>& sets = {});
