// The MPI world shared by the MPI test cases (created in main).
#pragma once

#include "comm/mpi_communicator.h"

extern amp::MpiCommunicator* g_world;

inline amp::MpiCommunicator& world() { return *g_world; }
