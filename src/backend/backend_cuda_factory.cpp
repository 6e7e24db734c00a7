// Backend factory of a CUDA build: CUDA when asked for (or for auto when a device is visible),
// else the CPU backend. The CUDA backend is reached through its table (cuda/cuda_module.h): linked
// into the executable (the device tests, the GPU benchmarks) or, in amp_ddp, loaded from
// libamp_cuda.so the first time a run needs it. A run on the CPU never loads it, nor the CUDA
// libraries behind it.
#include <cstdlib>
#include <mutex>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/shared_library.h"
#include "cuda/cuda_module.h"

#ifndef AMP_CUDA_MODULE_PATH
#define AMP_CUDA_MODULE_PATH ""
#endif

// Present when the executable links the CUDA backend itself; amp_ddp leaves it unresolved.
extern "C" const amp::cuda::Module* amp_cuda_module_v1() __attribute__((weak));

namespace amp {
namespace {

constexpr const char* kModuleFile = "libamp_cuda.so";

// The table, or nullptr with *why. Looked up as $AMP_CUDA_MODULE when set, else beside the
// executable, else where the build wrote it.
const cuda::Module* find_module(std::string* why) {
  static std::once_flag once;
  static const cuda::Module* table = nullptr;
  static std::string error;
  std::call_once(once, [] {
    if (amp_cuda_module_v1) {
      table = amp_cuda_module_v1();
      return;
    }
    std::vector<std::string> places;
    if (const char* env = std::getenv("AMP_CUDA_MODULE"); env && *env) {
      places.push_back(env);
    } else {
      if (const std::string dir = executable_dir(); !dir.empty()) places.push_back(dir + "/" + kModuleFile);
      if (*AMP_CUDA_MODULE_PATH && (places.empty() || places.front() != AMP_CUDA_MODULE_PATH))
        places.push_back(AMP_CUDA_MODULE_PATH);
    }
    std::string tried;
    for (const std::string& path : places) {
      std::string why_not;
      void* lib = open_library(path, &why_not);
      using Entry = const cuda::Module* (*)();
      const auto entry = reinterpret_cast<Entry>(library_symbol(lib, "amp_cuda_module_v1"));
      if (lib && !entry) why_not = strcat(path, ": no amp_cuda_module_v1 (not amp_ddp's CUDA module)");
      if (entry && entry()->abi != cuda::kModuleAbi)
        why_not = strcat(path, ": version ", entry()->abi, " of the module's table, this amp_ddp needs ", cuda::kModuleAbi,
                         " (a libamp_cuda.so of another build)");
      else if (entry) {
        table = entry();
        return;
      }
      tried += strcat(tried.empty() ? "" : "; ", why_not);
    }
    error = strcat("the CUDA backend (", kModuleFile, ") cannot be loaded: ",
                   tried.empty() ? std::string("no place to look for it") : tried);
  });
  if (!table && why) *why = error;
  return table;
}

// The NVIDIA driver's count of devices, read without the CUDA backend: -1 without a driver.
int driver_device_count() {
  static const int n = [] {
    void* lib = open_library("libcuda.so.1", nullptr);
    if (!lib) return -1;
    using Init = int (*)(unsigned);
    using Count = int (*)(int*);
    const auto init = reinterpret_cast<Init>(library_symbol(lib, "cuInit"));
    const auto count = reinterpret_cast<Count>(library_symbol(lib, "cuDeviceGetCount"));
    int devices = 0;
    if (!init || !count || init(0) != 0 || count(&devices) != 0) return 0;
    return devices;
  }();
  return n;
}

// Without a device the driver sees, the backend is not loaded to be told there is none (a linked
// backend is asked directly).
bool driver_sees_a_device() { return amp_cuda_module_v1 || driver_device_count() > 0; }

}  // namespace

namespace cuda {

const Module& module() {
  std::string why;
  const Module* m = find_module(&why);
  if (!m) throw Error(ErrorKind::Device, why);
  return *m;
}

}  // namespace cuda

bool cuda_available() {
  if (!driver_sees_a_device()) return false;
  const cuda::Module* m = find_module(nullptr);
  return m && m->device_visible(nullptr);
}

std::string build_info() {
  std::string why;
  const cuda::Module* m = find_module(&why);
  return m ? m->build_info() : strcat("CUDA: built, but ", why);
}

std::unique_ptr<Backend> make_backend(const std::string& device, int local_rank, int threads) {
  if (device == "cuda") {
    std::string why;
    const cuda::Module* found = find_module(&why);
    if (!found) throw Error(ErrorKind::Device, strcat("run.device is cuda but ", why, "; use run.device: cpu or auto"));
    const cuda::Module& m = *found;
    if (!m.device_visible(&why))
      throw Error(ErrorKind::Device, strcat("run.device is cuda but no CUDA device is visible (", why,
                                            "); use run.device: cpu or auto"));
    return m.make_backend(local_rank);
  }
  // auto: CUDA where a device is visible. A backend that cannot be loaded where the driver sees one
  // is an error, not a silent run on the CPU.
  if (device == "auto" && driver_sees_a_device()) {
    std::string why;
    const cuda::Module* m = find_module(&why);
    if (!m)
      throw Error(ErrorKind::Device, strcat("run.device is auto and the NVIDIA driver sees a GPU, but ", why,
                                            "; use run.device: cpu to run on the CPU"));
    if (m->device_visible(nullptr)) return m->make_backend(local_rank);
  }
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace amp
