// Small helpers shared by the unit tests: a temporary folder and file writer, an error's message.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <unistd.h>

#include "core/error.h"
#include "core/hash.h"

namespace amp_test {

// A fresh folder under the system temp dir, removed (with its contents) on destruction.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("amp_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string path() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string p = file(name);
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

 private:
  std::filesystem::path path_;
};

// The message of the amp::Error of `kind` that f throws, or a text that no expected message
// contains (another kind, another exception, none).
inline std::string error_of(amp::ErrorKind kind, const std::function<void()>& f) {
  try {
    f();
  } catch (const amp::Error& e) {
    if (e.kind() == kind) return e.what();
    return std::string("<wrong error kind> ") + e.what();
  } catch (const std::exception& e) {
    return std::string("<not an amp::Error> ") + e.what();
  }
  return "<no exception>";
}

}  // namespace amp_test

namespace amp_test {

// Checkpoint files laid out by hand (the layout in src/train/checkpoint.h), so tests can give the
// reader headers and prefixes the writer never produces, with a valid checksum so it looks past it.
inline void seal_checkpoint(std::string& bytes) {
  if (bytes.size() < 8) return;
  const uint64_t h = amp::hash64(bytes.data(), bytes.size() - 8);
  std::memcpy(&bytes[bytes.size() - 8], &h, sizeof h);
}

inline std::string checkpoint_bytes(const std::string& header, const std::string& sections, uint32_t format = 1,
                                    uint32_t flags = 0) {
  std::string out("AMPCKPT", 8);  // the terminating NUL is the magic's eighth byte
  const uint64_t header_len = header.size();
  out.append(reinterpret_cast<const char*>(&format), 4);
  out.append(reinterpret_cast<const char*>(&flags), 4);
  out.append(reinterpret_cast<const char*>(&header_len), 8);
  out += header;
  out += sections;
  out.append(8, '\0');
  seal_checkpoint(out);
  return out;
}

}  // namespace amp_test
