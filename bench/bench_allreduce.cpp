// All-reduce benchmark in nccl-tests columns: the project's communicator (16-bit sums through the
// user-defined MPI ops) for f32/f16/bf16, next to raw MPI_Allreduce on floats of the same byte
// size measured in the same run, and the ZeRO stage 1 pair (reduce-scatter into a shard, then the
// in-place all-gather) that replaces the all-reduce with distributed.zero: 1. Run under mpirun:
//   scripts/mpirun.sh -np 2 build/bench/bench_allreduce [--min 4096] [--max 268435456] [--iters 20]
// algbw = bytes / time; busbw = algbw * 2 (n - 1) / n; #wrong counts elements that differ from
// the exact expectation (rank-valued data whose sums are exact); a wrong element fails the run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "core/convert.h"

using namespace amp;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Median time of `iters` runs of op after 3 warm-ups, each after an untimed prepare() and a
// barrier, agreed across ranks (the slowest rank's median).
template <typename P, typename F>
double time_op(MpiCommunicator& c, int iters, P&& prepare, F&& op) {
  for (int i = 0; i < 3; ++i) prepare(), op();
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    prepare();
    c.barrier();
    const double t0 = now();
    op();
    t.push_back(now() - t0);
  }
  std::sort(t.begin(), t.end());
  float med = float(t[t.size() / 2]);
  c.allreduce(view_of(&med, 1), ReduceOp::Max);
  return med;
}

}  // namespace

int main(int argc, char** argv) {
  MpiCommunicator c(&argc, &argv);
  size_t min_b = 4096, max_b = size_t(256) << 20;
  int iters = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--min") min_b = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--max") max_b = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--iters") iters = std::atoi(argv[i + 1]);
  }
  const int n = c.size(), r = c.rank();
  const double bus = n > 1 ? 2.0 * (n - 1) / n : 1.0;
  if (r == 0) {
    std::printf("# amp_ddp all-reduce: %d ranks; peer = raw MPI_Allreduce(MPI_FLOAT, MPI_SUM) on the same bytes\n", n);
    std::printf("# ratio = raw time / ours; rs+ag = reduce-scatter + in-place all-gather, its time / the all-reduce's\n");
    std::printf("# %12s %12s %5s %6s | %10s %8s %8s %6s | %10s %8s | %6s | %10s %6s %6s\n", "size(B)", "count", "type",
                "redop", "time(us)", "algbw", "busbw", "#wrong", "raw(us)", "busbw", "ratio", "rs+ag(us)", "#wrong",
                "vs ar");
  }
  int failures = 0;
  std::vector<char> buf(max_b), raw(max_b), shard(max_b);
  for (size_t bytes = min_b; bytes <= max_b; bytes *= 4) {
    // Peer: raw MPI on floats of the same byte size.
    const size_t nf = bytes / 4;
    float* rf = reinterpret_cast<float*>(raw.data());
    const double t_raw = time_op(c, iters, [&] { std::fill(rf, rf + nf, 1.0f); },
                                 [&] { c.raw_allreduce(view_of(rf, nf), ReduceOp::Sum); });
    for (DType t : {DType::F32, DType::F16, DType::BF16}) {
      const size_t count = bytes / dtype_size(t);
      // Element i holds (r + 1) * (i % 7 + 1): every partial sum is an integer <= 7 n (n + 1) / 2,
      // exact in every dtype for the rank counts used here.
      std::vector<float> src(std::min<size_t>(count, 7));
      auto fill = [&] {
        for (size_t k = 0; k < src.size(); ++k) src[k] = float((r + 1) * (k + 1));
        char* p = buf.data();
        const size_t es = dtype_size(t);
        for (size_t i = 0; i < count; i += 7) convert(src.data(), DType::F32, p + i * es, t, std::min<size_t>(7, count - i));
      };
      const double secs = time_op(c, iters, fill, [&] { c.allreduce(BufView{buf.data(), count, t}, ReduceOp::Sum); });
      // Check the last result.
      auto count_wrong = [&](size_t upto) {
        size_t wrong = 0;
        std::vector<float> got(std::min<size_t>(upto, size_t(1) << 20));
        convert(buf.data(), t, got.data(), DType::F32, got.size());
        for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != float((i % 7 + 1) * size_t(n * (n + 1) / 2));
        int w = int(wrong);
        c.allreduce(view_of(&w, 1), ReduceOp::Max);
        return w;
      };
      const int w = count_wrong(count);
      failures += w != 0;
      // The ZeRO pair on whole blocks of the same buffer: this rank's block reduced into a shard,
      // copied back in place (the optimizer writes there), all blocks gathered.
      const size_t block = count / size_t(n), es = dtype_size(t);
      const double secs_z = time_op(c, iters, fill, [&] {
        c.reduce_scatter(buf.data(), BufView{shard.data(), block, t}, ReduceOp::Sum);
        std::memcpy(buf.data() + size_t(r) * block * es, shard.data(), block * es);
        c.allgather_in_place(BufView{buf.data(), block * size_t(n), t});
      });
      const int wz = count_wrong(block * size_t(n));
      failures += wz != 0;
      if (r == 0) {
        const double algbw = double(bytes) / secs / 1e9;
        std::printf("  %12zu %12zu %5s %6s | %10.1f %8.3f %8.3f %6d | %10.1f %8.3f | %6.3f | %10.1f %6d %6.3f\n", bytes,
                    count, dtype_name(t), "sum", secs * 1e6, algbw, algbw * bus, w, t_raw * 1e6,
                    double(bytes) / t_raw / 1e9 * bus, t_raw / secs, secs_z * 1e6, wz, secs_z / secs);
      }
    }
  }
  if (r == 0 && failures) std::printf("# %d configurations had wrong elements\n", failures);
  return failures ? 1 : 0;
}
