// What reading a batch of windows from token shards left in their files costs, against the same
// copy from tokens held in memory (the ceiling: a plain widening copy), and the resident memory.
// Usage: bench_token_stream SHARD... [--seq 64] [--batch 16] [--batches 2000]
// Prints microseconds per batch for both, their ratio, and this process's resident memory before
// and after (a stream of files must not grow it with the shards' size).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "data/dataset.h"

using namespace amp;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  return -1;
}

// Microseconds per batch of `batch` random windows of seq + 1 tokens.
double time_batches(const TokenStream& s, size_t seq, size_t batch, size_t batches, uint64_t seed) {
  const size_t windows = (s.size() - 1) / seq;
  std::vector<int32_t> out((seq + 1) * batch);
  Rng rng(seed);
  const double t0 = now();
  for (size_t b = 0; b < batches; ++b)
    for (size_t r = 0; r < batch; ++r) s.copy(size_t(rng.below(windows)) * seq, seq + 1, out.data() + r * (seq + 1));
  return (now() - t0) / double(batches) * 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> shards;
  size_t seq = 64, batch = 16, batches = 2000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seq" && i + 1 < argc) seq = std::strtoul(argv[++i], nullptr, 10);
    else if (a == "--batch" && i + 1 < argc) batch = std::strtoul(argv[++i], nullptr, 10);
    else if (a == "--batches" && i + 1 < argc) batches = std::strtoul(argv[++i], nullptr, 10);
    else shards.push_back(a);
  }
  if (shards.empty()) {
    std::fprintf(stderr, "usage: bench_token_stream SHARD... [--seq 64] [--batch 16] [--batches 2000]\n");
    return 2;
  }
  const long rss0 = rss_kib();
  const TokenStream files = read_token_shards(shards);
  const long rss_open = rss_kib();
  const int64_t top = max_token(files);  // a full scan, as the vocabulary check does
  const long rss_scan = rss_kib();
  const double us_files = time_batches(files, seq, batch, batches, 1);
  const long rss_read = rss_kib();
  // The ceiling: the same kind of copy from a stream in memory (the first 64 Mi tokens at most).
  const size_t n_mem = std::min(files.size(), size_t(64) << 20);
  const TokenStream memory(files.slice(0, n_mem).to_vector());
  const double us_memory = time_batches(memory, seq, batch, batches, 1);
  std::printf("token stream: %zu shard(s), %.3f G tokens (%.2f GB on disk), largest token %lld\n", shards.size(),
              double(files.size()) / 1e9, double(files.size()) * 2 / 1e9, (long long)top);
  std::printf("batch of %zu windows x %zu tokens: shards %.1f us, in memory %.1f us (ratio %.2f)\n", batch, seq + 1,
              us_files, us_memory, us_files / us_memory);
  std::printf("resident memory: start %.1f MiB, after opening %.1f MiB, after a full scan %.1f MiB, after %zu batches %.1f MiB\n",
              rss0 / 1024.0, rss_open / 1024.0, rss_scan / 1024.0, batches, rss_read / 1024.0);
  return 0;
}
