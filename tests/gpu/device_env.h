// Shared by the device test cases (tests/gpu/): the MPI world and the job's folder (mpi_env.h), the
// device under test next to its CPU twin, mirrored buffers holding the same bits on both, per-dtype
// comparisons, and the seam that picks the device.
//
// The same test sources build twice: amp_gpu_tests, where the device is the CUDA backend (run on a
// GPU machine by scripts/gpu_check.sh), and amp_device_logic_tests, where it is a second CPU backend
// (run by ctest everywhere, CI included). The CPU run checks everything a test does except the
// device's own arithmetic: sizes, poisoning, snapshots, expectations, set-ups, bookkeeping; a wrong
// one fails there, not on the first GPU. The seam (device_cuda.cpp or device_cpu.cpp, exactly one
// linked) is every place the two builds differ.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "core/convert.h"
#include "core/half.h"
#include "core/rng.h"
#include "tests/mpi/mpi_env.h"

namespace gpu_test {

// ---- the seam (device_cuda.cpp / device_cpu.cpp) ---------------------------------------------

// The backend under test for this process's local rank: CUDA (REQUIREs a visible device) or a CPU
// backend of 2 threads.
std::unique_ptr<amp::Backend> make_device(int local_rank = 0);
// run.device of the trainer cases: "cuda" or "cpu".
const char* device_name();
bool device_is_gpu();
// The device's GEMM paths a test can force, in order (CUDA: cuBLASLt where it has an algorithm,
// then every product on cublasGemmStridedBatchedEx; CPU: oneDNN, one path); select_gemm_path
// makes the i-th the device's from now on.
std::vector<std::string> gemm_paths();
void select_gemm_path(amp::Backend& dev, size_t i);
// Which library runs these arguments on the device (planning only, nothing runs).
std::string gemm_path(amp::Backend& dev, const amp::GemmArgs& g);
// The device's fused-attention paths a test can force, in order (CUDA: tensor cores where they
// take the shape (F16/BF16, head dimension 64, cuda/attention_tc.h), then the specification's
// chains everywhere; CPU: BF16 on the matmul on AMX CPUs or on the kernels' BF16 products on
// AVX-512-BF16 ones, then the specification); exact: the
// path gives the CPU twin's bits.
// select_attention_path makes the i-th the device's from now on.
struct AttentionPath {
  std::string name;
  bool exact;
};
std::vector<AttentionPath> attention_paths();
void select_attention_path(amp::Backend& dev, size_t i);

// The communicator a trainer would reduce the device's gradients with: NCCL over the device's
// stream, or the MPI world itself (host memory) for the CPU. Owned here when it was created.
class DeviceComm {
 public:
  explicit DeviceComm(amp::Backend& dev);
  ~DeviceComm();
  DeviceComm(const DeviceComm&) = delete;
  DeviceComm& operator=(const DeviceComm&) = delete;
  amp::Communicator& get() { return *comm_; }

 private:
  std::unique_ptr<amp::Communicator> owned_;
  amp::Communicator* comm_ = nullptr;
};

// ---- capture ---------------------------------------------------------------------------------

// A step captured on the device (a CUDA graph) where the backend can capture, else kept as the
// function itself (the CPU cannot capture): replay() runs it again either way, so a test's replay
// logic (poisoned outputs rewritten, the same bits) is checked on both. Like a CUDA capture,
// constructing it records the step without running it.
class CapturedStep {
 public:
  CapturedStep(amp::Backend& be, std::function<void()> step) : be_(be) {
    graph_ = be_.capture().begin_capture();
    if (graph_) {
      step();
      be_.capture().end_capture();
    } else {
      step_ = std::move(step);
    }
  }
  void replay() {
    if (graph_) be_.capture().replay();
    else step_();
  }
  bool is_graph() const { return graph_; }

 private:
  amp::Backend& be_;
  bool graph_ = false;
  std::function<void()> step_;
};

inline std::vector<float> randn(size_t n, uint64_t seed, double scale = 1.0) {
  amp::Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = float(scale * r.normal());
    if (x == 0.0f) x = 1e-3f;  // never zeros: they hide unwritten outputs
  }
  return v;
}

// The same values, stored in `dtype`, in memory of the CPU backend and of the CUDA backend.
struct Mirror {
  amp::Buffer cbuf, gbuf;
  amp::Tensor c, g;  // views on each side
  Mirror() = default;
  Mirror(amp::Backend& cpu, amp::Backend& gpu, const std::vector<float>& v, amp::DType dt, size_t rows, size_t cols,
         size_t pad_elems = 0) {
    REQUIRE(v.size() == rows * cols);
    const size_t es = amp::dtype_size(dt), bytes = (pad_elems + v.size()) * es;
    std::vector<unsigned char> raw(bytes, 0);
    amp::convert(v.data(), amp::DType::F32, raw.data() + pad_elems * es, dt, v.size());
    cbuf = cpu.memory().alloc(bytes);
    gbuf = gpu.memory().alloc(bytes);
    cpu.memory().upload(cbuf.data(), raw.data(), bytes);
    gpu.memory().upload(gbuf.data(), raw.data(), bytes);
    c = cbuf.tensor(dt, rows, cols, pad_elems * es);
    g = gbuf.tensor(dt, rows, cols, pad_elems * es);
  }
  // An output: zero-filled on both sides (the backends' alloc zero-fills).
  static Mirror output(amp::Backend& cpu, amp::Backend& gpu, amp::DType dt, size_t rows, size_t cols) {
    Mirror m;
    const size_t bytes = std::max<size_t>(1, rows * cols) * amp::dtype_size(dt);
    m.cbuf = cpu.memory().alloc(bytes);
    m.gbuf = gpu.memory().alloc(bytes);
    m.c = m.cbuf.tensor(dt, rows, cols);
    m.g = m.gbuf.tensor(dt, rows, cols);
    return m;
  }
};

// A tensor's values as floats (downloaded, then widened exactly).
inline std::vector<float> read(amp::Backend& be, const amp::Tensor& t) {
  std::vector<unsigned char> raw(t.bytes());
  be.memory().download(raw.data(), t.data, raw.size());
  std::vector<float> v(t.numel());
  amp::convert(raw.data(), t.dtype, v.data(), amp::DType::F32, v.size());
  return v;
}

inline std::vector<unsigned char> read_raw(amp::Backend& be, const void* p, size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  be.memory().download(raw.data(), p, bytes);
  return raw;
}

template <typename T>
T read_one(amp::Backend& be, const void* p) {
  T v;
  be.memory().download(&v, p, sizeof v);
  return v;
}

// One ulp of the dtype at 1.0: the relative tolerance of one rounding.
inline double eps_of(amp::DType t) {
  return t == amp::DType::F16 ? 0x1p-10 : t == amp::DType::BF16 ? 0x1p-7 : 0x1p-23;
}

struct Compare {
  size_t bad = 0, first = 0, nan_mismatch = 0;
  double worst = 0;  // largest |g - c| / tol
  std::string describe(const std::vector<float>& g, const std::vector<float>& c) const {
    std::ostringstream os;
    os << bad << " of " << c.size() << " outside tolerance (" << nan_mismatch << " NaN mismatches), worst "
       << worst << " x tol";
    if (bad) os << "; first at " << first << ": gpu " << g[first] << " cpu " << c[first];
    return os.str();
  }
};

// |g - c| <= atol + rtol |c| elementwise; NaN must meet NaN, inf the same inf.
inline Compare compare(const std::vector<float>& g, const std::vector<float>& c, double rtol, double atol) {
  Compare r;
  REQUIRE(g.size() == c.size());
  for (size_t i = 0; i < c.size(); ++i) {
    const double a = g[i], b = c[i];
    bool ok;
    if (std::isnan(b) || std::isnan(a)) {
      ok = std::isnan(a) && std::isnan(b);
      if (!ok) ++r.nan_mismatch;
    } else if (std::isinf(b) || std::isinf(a)) {
      ok = a == b;
    } else {
      const double tol = atol + rtol * std::fabs(b);
      const double d = std::fabs(a - b);
      r.worst = std::max(r.worst, tol > 0 ? d / tol : (d > 0 ? 1e30 : 0.0));
      ok = d <= tol;
    }
    if (!ok && r.bad++ == 0) r.first = i;
  }
  return r;
}

#define GPU_REQUIRE_CLOSE(gv, cv, rtol, atol)                     \
  do {                                                            \
    const auto gpu_cmp_ = ::gpu_test::compare((gv), (cv), (rtol), (atol)); \
    INFO(gpu_cmp_.describe((gv), (cv)));                          \
    REQUIRE(gpu_cmp_.bad == 0);                                   \
  } while (0)

inline double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v)
    if (std::isfinite(x)) m = std::max(m, double(std::fabs(x)));
  return m;
}

}  // namespace gpu_test
