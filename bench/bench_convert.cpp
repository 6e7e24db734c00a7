// Single-thread throughput of the bulk float <-> f16/bf16 conversions (core/convert.h), each next
// to memcpy measured in the same run on the same number of bytes moved, from in-cache sizes to
// arrays far beyond the last-level cache. Usage: bench_convert [--all] [--quick]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/convert.h"
#include "core/rng.h"

namespace {

using Clock = std::chrono::steady_clock;

// 64-byte aligned, page-touched buffer (so first-touch page faults never land in a timing).
struct Buffer {
  explicit Buffer(size_t bytes) : size(bytes) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    data = static_cast<unsigned char*>(std::aligned_alloc(64, rounded == 0 ? 64 : rounded));
    if (data == nullptr) {
      std::fprintf(stderr, "bench_convert: out of memory (%zu bytes)\n", bytes);
      std::exit(1);
    }
    std::memset(data, 0x5a, rounded);
  }
  ~Buffer() { std::free(data); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  unsigned char* data;
  size_t size;
};

// Through a volatile pointer so the compiler can neither inline nor drop the copy.
void* (*volatile g_memcpy)(void*, const void*, size_t) = std::memcpy;

struct Medians {
  double fn;
  double ref;
};

// Median seconds per call of fn() and of ref(), from `samples` timings of `inner` back-to-back
// calls each, after one untimed warm-up sample. The two are timed alternately so that both see the
// same machine state (on a shared VM the memory bandwidth drifts over hundreds of milliseconds).
template <typename Fn, typename Ref>
Medians paired_median_seconds(Fn&& fn, Ref&& ref, int samples, int inner) {
  std::vector<double> tf, tr;
  auto time = [inner](auto& f) {
    const auto t0 = Clock::now();
    for (int k = 0; k < inner; ++k) f();
    return std::chrono::duration<double>(Clock::now() - t0).count() / inner;
  };
  for (int s = -1; s < samples; ++s) {
    const double a = time(fn);
    const double b = time(ref);
    if (s >= 0) {
      tf.push_back(a);
      tr.push_back(b);
    }
  }
  std::sort(tf.begin(), tf.end());
  std::sort(tr.begin(), tr.end());
  return {tf[tf.size() / 2], tr[tr.size() / 2]};
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (b >= 1024.0 && u < 3) {
    b /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f %s", b, units[u]);
  return buf;
}

std::string human_time(double s) {
  char buf[32];
  if (s < 1e-3)
    std::snprintf(buf, sizeof buf, "%.2f us", s * 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  bool all_paths = false;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--all") {
      all_paths = true;
    } else if (a == "--quick") {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: %s [--all] [--quick]\n", argv[0]);
      return 2;
    }
  }

  // Sizes are the float array's bytes; the 16-bit side is half of that.
  std::vector<size_t> float_bytes = {size_t{16} << 10, size_t{256} << 10, size_t{4} << 20,
                                     size_t{64} << 20, size_t{256} << 20};
  if (quick) float_bytes.pop_back();
  const size_t max_n = float_bytes.back() / 4;

  std::vector<amp::ConvertKernels> paths;
  if (all_paths)
    paths = amp::available_convert_kernels();
  else
    paths.push_back(amp::active_convert_kernels());

  Buffer f32_src(max_n * 4), f32_dst(max_n * 4), h16_src(max_n * 2), h16_dst(max_n * 2);
  Buffer copy_a(max_n * 3), copy_b(max_n * 3);  // memcpy of (src + dst) / 2 = 3n bytes
  {
    // Realistic activations/gradients: mostly normal values, some beyond the f16 range.
    amp::Rng rng(12345);
    float* f = reinterpret_cast<float*>(f32_src.data);
    for (size_t i = 0; i < max_n; ++i) f[i] = static_cast<float>(rng.normal() * 100.0);
  }

  struct Direction {
    const char* name;
    bool to_16;
    bool bf16;
  };
  const Direction directions[] = {{"f32->f16", true, false},
                                  {"f16->f32", false, false},
                                  {"f32->bf16", true, true},
                                  {"bf16->f32", false, true}};

  std::printf("bench_convert: single thread; active path '%s'; available:",
              amp::active_convert_kernels().name.c_str());
  for (const auto& k : amp::available_convert_kernels()) std::printf(" %s", k.name.c_str());
  std::printf("\n");
  std::printf(
      "bytes moved = bytes read + bytes written = 6n for n elements; GB/s = bytes moved / median "
      "time (1 GB = 1e9 B);\nmemcpy GB/s = memcpy of 3n bytes (so it also reads 3n and writes "
      "3n), timed alternately with the row's kernel, same definition; ratio = GB/s / memcpy GB/s\n\n");
  std::printf("%-9s | %-10s | %10s | %11s | %12s | %7s | %11s | %5s\n", "direction", "path", "n",
              "bytes moved", "time (med)", "GB/s", "memcpy GB/s", "ratio");
  std::printf(
      "----------+------------+------------+-------------+--------------+---------+-------------+"
      "------\n");

  for (const Direction& d : directions) {
    for (const size_t fb : float_bytes) {
      const size_t n = fb / 4;
      const double moved = static_cast<double>(n) * 6.0;
      // Enough calls per sample to reach ~16 MB moved, and fewer samples for the huge arrays.
      const int inner = static_cast<int>(std::max(1.0, 16e6 / moved));
      const int samples = moved > 1e8 ? 5 : 9;

      if (!d.to_16) {  // 16-bit input: valid values converted from the float data
        const auto& k = amp::active_convert_kernels();
        (d.bf16 ? k.f32_to_bf16 : k.f32_to_f16)(reinterpret_cast<const float*>(f32_src.data),
                                                reinterpret_cast<uint16_t*>(h16_src.data), n);
      }
      auto copy = [&] { g_memcpy(copy_b.data, copy_a.data, n * 3); };

      for (const auto& p : paths) {
        Medians t{};
        if (d.to_16) {
          const auto fn = d.bf16 ? p.f32_to_bf16 : p.f32_to_f16;
          const auto* s = reinterpret_cast<const float*>(f32_src.data);
          auto* o = reinterpret_cast<uint16_t*>(h16_dst.data);
          t = paired_median_seconds([&] { fn(s, o, n); }, copy, samples, inner);
        } else {
          const auto fn = d.bf16 ? p.bf16_to_f32 : p.f16_to_f32;
          const auto* s = reinterpret_cast<const uint16_t*>(h16_src.data);
          auto* o = reinterpret_cast<float*>(f32_dst.data);
          t = paired_median_seconds([&] { fn(s, o, n); }, copy, samples, inner);
        }
        const double gbs = moved / t.fn / 1e9;
        const double copy_gbs = moved / t.ref / 1e9;
        std::printf("%-9s | %-10s | %10zu | %11s | %12s | %7.2f | %11.2f | %5.2f\n", d.name,
                    p.name.c_str(), n, human_bytes(moved).c_str(), human_time(t.fn).c_str(), gbs,
                    copy_gbs, gbs / copy_gbs);
      }
    }
  }
  return 0;
}
