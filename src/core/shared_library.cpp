#include "core/shared_library.h"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <map>
#include <mutex>

namespace amp {

void* open_library(const std::string& path, std::string* why) {
  static std::mutex mutex;
  static std::map<std::string, void*> opened;  // never closed: their code stays in use
  std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = opened.find(path); it != opened.end()) return it->second;
  dlerror();
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    if (why) *why = e ? e : "dlopen failed";
    return nullptr;
  }
  opened.emplace(path, lib);
  return lib;
}

void* library_symbol(void* lib, const char* symbol) { return lib ? ::dlsym(lib, symbol) : nullptr; }

std::string executable_dir() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  const std::string exe(buf, size_t(n));
  const size_t slash = exe.rfind('/');
  return slash == std::string::npos ? "" : exe.substr(0, slash);
}

}  // namespace amp
