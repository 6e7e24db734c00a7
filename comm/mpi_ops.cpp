#include "comm/mpi_ops.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <vector>

#include "core/convert.h"
#include "core/half.h"

namespace amp::mpi {

namespace {
// ---- user-defined reductions on 16-bit floats (and NaN-propagating float max) ------------
// The arithmetic is FP32 with one rounding per combining step (sums: the vectorized f16_add /
// bf16_add; maxima, used for small flag buffers only: chunks through the conversions).
constexpr int kChunk = 512;

template <bool kBf16>
void sum16(void* in, void* inout, int* len, MPI_Datatype*) {
  (kBf16 ? bf16_add : f16_add)(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(inout), size_t(*len));
}

template <bool kBf16>
void max16(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  alignas(64) float fa[kChunk], fb[kChunk];
  for (int off = 0; off < *len; off += kChunk) {
    const int n = std::min(kChunk, *len - off);
    if (kBf16) {
      bf16_to_f32(a + off, fa, n);
      bf16_to_f32(b + off, fb, n);
    } else {
      f16_to_f32(a + off, fa, n);
      f16_to_f32(b + off, fb, n);
    }
    for (int i = 0; i < n; ++i) {
      const float x = fa[i], y = fb[i];
      fb[i] = (x != x || y != y) ? x + y : (x > y ? x : y);
    }
    if (kBf16) f32_to_bf16(fb, b + off, n);
    else f32_to_f16(fb, b + off, n);
  }
}

void max_f32(void* in, void* inout, int* len, MPI_Datatype*) {
  const float* a = static_cast<const float*>(in);
  float* b = static_cast<float*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = a[i], y = b[i];
    b[i] = (x != x || y != y) ? x + y : (x > y ? x : y);
  }
}

struct Ops {
  MPI_Op f16_sum, bf16_sum, f16_max, bf16_max, f32_max;
};
Ops g_ops;  // created once after MPI_Init, freed before MPI_Finalize

}  // namespace

void create_ops() {
  MPI_CHECK(MPI_Op_create(&sum16<false>, 1, &g_ops.f16_sum));
  MPI_CHECK(MPI_Op_create(&sum16<true>, 1, &g_ops.bf16_sum));
  MPI_CHECK(MPI_Op_create(&max16<false>, 1, &g_ops.f16_max));
  MPI_CHECK(MPI_Op_create(&max16<true>, 1, &g_ops.bf16_max));
  MPI_CHECK(MPI_Op_create(&max_f32, 1, &g_ops.f32_max));
}

void free_ops() {
  for (MPI_Op* op : {&g_ops.f16_sum, &g_ops.bf16_sum, &g_ops.f16_max, &g_ops.bf16_max, &g_ops.f32_max})
    MPI_Op_free(op);
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F16:
    case DType::BF16: return MPI_UINT16_T;
    case DType::I32: return MPI_INT32_T;
    case DType::U8: return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(DType t, ReduceOp op) {
  const bool max = op == ReduceOp::Max;
  switch (t) {
    case DType::F32: return max ? g_ops.f32_max : MPI_SUM;
    case DType::F16: return max ? g_ops.f16_max : g_ops.f16_sum;
    case DType::BF16: return max ? g_ops.bf16_max : g_ops.bf16_sum;
    case DType::I32:
    case DType::U8: return max ? MPI_MAX : MPI_SUM;
  }
  return MPI_OP_NULL;
}

void divide_in_place(BufView buf, int size) {
  const float inv = 1.0f / static_cast<float>(size);
  if (buf.dtype == DType::F32) {
    float* p = static_cast<float*>(buf.data);
    for (size_t i = 0; i < buf.count; ++i) p[i] *= inv;
    return;
  }
  AMP_CHECK(is_float16(buf.dtype), "average is defined for float types only, got ", dtype_name(buf.dtype));
  uint16_t* p = static_cast<uint16_t*>(buf.data);
  alignas(64) float f[kChunk];
  for (size_t off = 0; off < buf.count; off += kChunk) {
    const size_t n = std::min<size_t>(kChunk, buf.count - off);
    convert(p + off, buf.dtype, f, DType::F32, n);
    for (size_t i = 0; i < n; ++i) f[i] *= inv;
    convert(f, DType::F32, p + off, buf.dtype, n);
  }
}

void add_into(const void* in, void* inout, size_t n, DType t) {
  switch (t) {
    case DType::F16: f16_add(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(inout), n); return;
    case DType::BF16: bf16_add(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(inout), n); return;
    case DType::F32: {
      const float* a = static_cast<const float*>(in);
      float* b = static_cast<float*>(inout);
      for (size_t i = 0; i < n; ++i) b[i] = a[i] + b[i];
      return;
    }
    case DType::I32: {
      const int32_t* a = static_cast<const int32_t*>(in);
      int32_t* b = static_cast<int32_t*>(inout);
      for (size_t i = 0; i < n; ++i) b[i] = int32_t(uint32_t(a[i]) + uint32_t(b[i]));
      return;
    }
    case DType::U8: {
      const uint8_t* a = static_cast<const uint8_t*>(in);
      uint8_t* b = static_cast<uint8_t*>(inout);
      for (size_t i = 0; i < n; ++i) b[i] = uint8_t(a[i] + b[i]);
      return;
    }
  }
}

constexpr int kRingTag = 7301;

// Ring reduce-scatter (sum): in N - 1 steps each rank passes a running partial sum of one block to
// the next rank and adds its own input for the block it receives; the last block it receives is
// its own, complete. Every element is added once per rank, in ring order.
void ring_reduce_scatter(MPI_Comm comm, int rank, int size, const char* send, BufView recv) {
  const size_t bytes = recv.bytes();
  AMP_CHECK(bytes <= size_t(INT_MAX), "reduce-scatter blocks of more than 2 GiB");
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  auto block = [&](int b) { return send + size_t((b % size + size) % size) * bytes; };
  std::unique_ptr<char[]> got(new char[bytes]), acc(size > 2 ? new char[bytes] : nullptr);
  const char* outgoing = block(rank - 1);  // step 0 sends this rank's input itself
  for (int s = 0; s < size - 1; ++s) {
    MPI_CHECK(MPI_Sendrecv(outgoing, int(bytes), MPI_BYTE, next, kRingTag, got.get(), int(bytes), MPI_BYTE, prev,
                           kRingTag, comm, MPI_STATUS_IGNORE));
    // got: the running sum of block (rank - s - 2) from the previous ranks; add this rank's part.
    char* out = s == size - 2 ? static_cast<char*>(recv.data) : acc.get();
    std::memcpy(out, block(rank - s - 2), bytes);
    add_into(got.get(), out, recv.count, recv.dtype);
    outgoing = out;
  }
}

// Ring all-gather in place: in N - 1 steps each rank forwards the block it received last.
void ring_allgather(MPI_Comm comm, int rank, int size, char* buf, size_t bytes) {
  AMP_CHECK(bytes <= size_t(INT_MAX), "all-gather blocks of more than 2 GiB");
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  auto block = [&](int b) { return buf + size_t((b % size + size) % size) * bytes; };
  for (int s = 0; s < size - 1; ++s)
    MPI_CHECK(MPI_Sendrecv(block(rank - s), int(bytes), MPI_BYTE, next, kRingTag + 1, block(rank - s - 1), int(bytes),
                           MPI_BYTE, prev, kRingTag + 1, comm, MPI_STATUS_IGNORE));
}
}  // namespace amp::mpi
