// The arithmetic and algorithms under MpiCommunicator (its .cpp and this file only; mpi.h stays
// out of public headers): MPI_CHECK, the user-defined MPI ops on 16-bit floats (FP32 arithmetic,
// one rounding per combining step) and NaN-propagating float max, the MPI datatype and op of a
// buffer, the average's division, and the ring reduce-scatter / in-place all-gather of ZeRO stage 1.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>

#include "comm/communicator.h"
#include "core/error.h"

namespace amp::mpi {

#define MPI_CHECK(call)                                                                      \
  do {                                                                                       \
    const int rc_ = (call);                                                                  \
    if (rc_ != MPI_SUCCESS) {                                                                \
      char msg_[MPI_MAX_ERROR_STRING];                                                       \
      int len_ = 0;                                                                          \
      MPI_Error_string(rc_, msg_, &len_);                                                    \
      throw Error(ErrorKind::Comm, strcat(__FILE__, ":", __LINE__, ": ", #call, " failed: ", \
                                          std::string(msg_, len_)));                         \
    }                                                                                        \
  } while (0)

void create_ops();  // once after MPI_Init
void free_ops();    // before MPI_Finalize
MPI_Datatype mpi_type(DType t);
MPI_Op mpi_op(DType t, ReduceOp op);
// Average = sum, then one multiplication by 1/size (a second rounding for 16-bit types).
void divide_in_place(BufView buf, int size);
// inout[i] += in[i] in the buffer's type (16-bit: FP32 add, one rounding: the MPI ops' arithmetic).
void add_into(const void* in, void* inout, size_t n, DType t);
// Ring reduce-scatter (sum) of send (size blocks of recv.count elements): this rank's block into recv.
void ring_reduce_scatter(MPI_Comm comm, int rank, int size, const char* send, BufView recv);
// Ring all-gather in place of buf (size blocks of `bytes`, block `rank` this rank's).
void ring_allgather(MPI_Comm comm, int rank, int size, char* buf, size_t bytes);

}  // namespace amp::mpi
