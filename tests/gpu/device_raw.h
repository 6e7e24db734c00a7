// Host bytes (ops_ref::Raw, tests/unit/ops_general_ref.h) mirrored in the device's memory, and the
// twin comparison of the op tests: the device's result against the CPU twin's, the same bits asked
// for, after a tolerance check that says how far apart differing results are.
#pragma once

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#include "../unit/ops_general_ref.h"
#pragma GCC diagnostic pop
#include "device_env.h"

namespace gpu_test {

// A device buffer holding a copy of host bytes (uploaded at construction).
class Dev {
 public:
  Dev(amp::Backend& be, const void* p, size_t n) : be_(&be), buf_(be.memory().alloc(std::max<size_t>(n, 1))), bytes(n) {
    if (n) be.memory().upload(buf_.data(), p, n);
  }
  Dev(amp::Backend& be, const ops_ref::Raw& r) : Dev(be, r.data(), r.bytes.size()) {}
  void* get() const { return buf_.data(); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(buf_.data());
  }
  // The buffer's bytes as values of t (waits for the device).
  ops_ref::Raw read(amp::DType t) const {
    ops_ref::Raw r(t, bytes / amp::dtype_size(t));
    if (bytes) be_->memory().download(r.data(), buf_.data(), bytes);
    return r;
  }
  // Every byte 0xff (a NaN in every float format): outputs a step must rewrite.
  void poison() const {
    const std::vector<unsigned char> ff(bytes, 0xff);
    if (bytes) be_->memory().upload(buf_.data(), ff.data(), bytes);
  }

 private:
  amp::Backend* be_;
  amp::Buffer buf_;

 public:
  const size_t bytes;
};

// Device against CPU: differing bits are counted; a difference beyond 4 FP32 ulp or one 16-bit ulp
// (of the CPU's value) is counted as out of tolerance too.
struct TwinCheck {
  size_t checked = 0, differ = 0, out_of_tol = 0;
  std::string first;
};

inline TwinCheck compare_twins(const ops_ref::Raw& dev, const ops_ref::Raw& cpu) {
  TwinCheck r;
  REQUIRE(dev.size() == cpu.size());
  REQUIRE(dev.t == cpu.t);
  const double rel =
      dev.t == amp::DType::F32 ? 8 * ops_ref::unit_roundoff(dev.t) : 2 * ops_ref::unit_roundoff(dev.t);
  for (size_t i = 0; i < cpu.size(); ++i) {
    ++r.checked;
    if (ops_ref::same_value(dev, i, cpu, i)) continue;
    ++r.differ;
    const double g = dev.get(i), c = cpu.get(i);
    const bool close = std::isfinite(g) && std::isfinite(c) &&
                       std::fabs(g - c) <= rel * std::fabs(c) + 2 * ops_ref::tiny_of(dev.t);
    if (!close) ++r.out_of_tol;
    if (r.differ == 1) {
      std::ostringstream os;
      os << "first difference at " << i << ": device " << g << " (bits " << std::hex << dev.bits(i) << ") cpu " << c
         << " (bits " << cpu.bits(i) << ")";
      r.first = os.str();
    }
  }
  return r;
}

#define TWINS_REQUIRE_SAME(dev_raw, cpu_raw, what)                                                          \
  do {                                                                                                      \
    const ::gpu_test::TwinCheck twin_ = ::gpu_test::compare_twins((dev_raw), (cpu_raw));                    \
    INFO(what << ": " << twin_.differ << " of " << twin_.checked << " differ, " << twin_.out_of_tol          \
              << " beyond tolerance; " << twin_.first);                                                     \
    REQUIRE(twin_.checked > 0);                                                                             \
    REQUIRE(twin_.out_of_tol == 0);                                                                         \
    REQUIRE(twin_.differ == 0);                                                                             \
  } while (0)

}  // namespace gpu_test
