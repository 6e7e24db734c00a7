// Times MPI_Allreduce (float, SUM) per message size; rank 0 prints one JSON line per size:
//   {"bytes": B, "ranks": P, "iters": N, "median_s": ..., "min_s": ..., "busbw_GBps": ...}
// Each iteration: barrier, time one all-reduce, take the slowest rank's time (MAX, untimed).
// Usage: allreduce_time [--budget SECONDS_PER_SIZE] [--iters MAX] SIZE_BYTES...
// Build: mpicxx -O2 -std=c++17 -o allreduce_time allreduce_time.cpp   (scaling_measure.sh does)
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  double budget = 2.0;
  int max_iters = 50;
  std::vector<long> sizes;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--budget" && i + 1 < argc) {
      budget = std::atof(argv[++i]);
    } else if (a == "--iters" && i + 1 < argc) {
      max_iters = std::atoi(argv[++i]);
    } else {
      sizes.push_back(std::atol(argv[i]));
    }
  }
  if (sizes.empty()) sizes = {4096, 65536, 262144, 1048576, 4194304};
  for (long bytes : sizes) {
    const long n = std::max(1L, bytes / static_cast<long>(sizeof(float)));
    std::vector<float> in(n, 1.0f), out(n, 0.0f);
    // warm-up (connections, buffers)
    for (int w = 0; w < 2; ++w) MPI_Allreduce(in.data(), out.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    std::vector<double> times;
    double spent = 0.0;
    int go = 1;
    while (go) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      MPI_Allreduce(in.data(), out.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double t = MPI_Wtime() - t0, tmax = 0.0;
      MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      times.push_back(tmax);
      spent += tmax;
      go = (static_cast<int>(times.size()) < max_iters && (spent < budget || times.size() < 3)) ? 1 : 0;
      MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);  // every rank stops at the same iteration
    }
    if (out[0] != static_cast<float>(size) && rank == 0) std::fprintf(stderr, "wrong sum %g\n", out[0]);
    std::sort(times.begin(), times.end());
    const double med = times[times.size() / 2];
    if (rank == 0) {
      const double busbw = 2.0 * (size - 1) / size * static_cast<double>(n * sizeof(float)) / med / 1e9;
      std::printf("{\"bytes\": %ld, \"ranks\": %d, \"iters\": %zu, \"median_s\": %.9g, \"min_s\": %.9g, \"busbw_GBps\": %.6g}\n",
                  static_cast<long>(n * sizeof(float)), size, times.size(), med, times.front(), busbw);
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
