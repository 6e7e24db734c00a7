// What a path is, for readers that must not block: opening a FIFO for reading waits for a writer,
// possibly forever, and a device or socket is never a data file or a checkpoint. And a small file
// written whole or not at all.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "core/error.h"

namespace amp {

// "a FIFO", "a directory", "a socket", "a character device", ...
std::string file_kind(mode_t mode);
std::string file_kind(std::filesystem::file_type type);

// "" when path is a regular file (or a link to one), else what is wrong with it ("not a regular
// file (a FIFO)", "cannot open: No such file or directory"), for the caller's error message. No
// file is opened.
std::string regular_file_problem(const std::string& path);

// A regular file open for reading at offsets. The path is checked before it is opened (opening a
// FIFO for reading blocks until a writer comes, possibly forever), opened with O_NONBLOCK in case
// it was replaced by a FIFO since, and what was opened checked again. Every error is
// Error(kind, context + what), context naming the file ("checkpoint error: PATH: ").
class ReadFile {
 public:
  ReadFile(const std::string& path, ErrorKind kind, std::string context);
  ~ReadFile();
  ReadFile(const ReadFile&) = delete;
  ReadFile& operator=(const ReadFile&) = delete;

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }  // when opened
  // n bytes at offset, all of them: a file that ends early is a "truncated: ..." error.
  void read(uint64_t offset, void* dst, size_t n) const;
  [[noreturn]] void fail(const std::string& what) const;

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  ErrorKind kind_;
  std::string context_;
};

// Writes a file atomically: temporary file (path.tmp.PID), fsync, rename, directory fsync. A
// failure is an Output error naming the file, and leaves no temporary behind.
void write_file_atomic(const std::string& path, const std::string& data);
// The same for a file produced piece by piece: `produce` hands its bytes, in order, to the sink it
// is given (a large file is never held whole in memory).
using ByteSink = std::function<void(const void* data, size_t bytes)>;
void write_file_atomic(const std::string& path, const std::function<void(const ByteSink&)>& produce);

}  // namespace amp
