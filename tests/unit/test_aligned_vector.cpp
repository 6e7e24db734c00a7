// aligned_vector (core/aligned_vector.h), the CPU kernels' scratch: its storage starts on a cache
// line for every element type and size, through growth, copies and moves, while small blocks from
// malloc in between keep the heap's addresses off the line.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "backend/cpu/transformer_rows.h"
#include "core/aligned_vector.h"

using namespace amp;

namespace {

template <typename T>
bool on_line(const aligned_vector<T>& v) {
  return reinterpret_cast<uintptr_t>(v.data()) % kCacheLine == 0;
}

}  // namespace

TEST_CASE("aligned_vector: storage on a cache line through growth, copies and moves", "[core][aligned]") {
  std::vector<void*> small;  // 24-byte blocks between the vectors' allocations
  for (size_t n : {size_t(1), size_t(3), size_t(16), size_t(17), size_t(1000), size_t(40000), size_t(1) << 20}) {
    small.push_back(std::malloc(24));
    aligned_vector<float> f(n, 1.5f);
    aligned_vector<uint16_t> h(n);
    aligned_vector<double> d(n);
    CHECK(on_line(f));
    CHECK(on_line(h));
    CHECK(on_line(d));
    CHECK(f[n - 1] == 1.5f);
    small.push_back(std::malloc(24));
    f.resize(3 * n + 1, 2.0f);  // reallocates: the new storage is on a line too
    CHECK(on_line(f));
    CHECK(f[n - 1] == 1.5f);
    CHECK(f[3 * n] == 2.0f);
    aligned_vector<float> copy = f;
    CHECK(on_line(copy));
    CHECK(copy == f);
    aligned_vector<float> moved = std::move(copy);
    CHECK(on_line(moved));
    for (size_t i = 0; i < n; ++i) h.push_back(uint16_t(i));
    CHECK(on_line(h));
  }
  for (void* p : small) std::free(p);
  // The layer norm's gamma and beta as floats
  const std::vector<float> src(385, 0.25f);
  const aligned_vector<float> g = cpu::trows::to_floats(src.data(), DType::F32, int64_t(src.size()));
  CHECK(on_line(g));
  CHECK(g[384] == 0.25f);
}
