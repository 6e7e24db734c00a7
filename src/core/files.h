// What a path is, for readers that must not block: opening a FIFO for reading waits for a writer,
// possibly forever, and a device or socket is never a data file or a checkpoint. And a small file
// written whole or not at all.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <string>

namespace amp {

// "a FIFO", "a directory", "a socket", "a character device", ...
std::string file_kind(mode_t mode);
std::string file_kind(std::filesystem::file_type type);

// "" when path is a regular file (or a link to one), else what is wrong with it ("not a regular
// file (a FIFO)", "cannot open: No such file or directory"), for the caller's error message. No
// file is opened.
std::string regular_file_problem(const std::string& path);

// Writes a file atomically: temporary file (path.tmp.PID), fsync, rename, directory fsync. A
// failure is an Output error naming the file, and leaves no temporary behind.
void write_file_atomic(const std::string& path, const std::string& data);
// The same for a file produced piece by piece: `produce` hands its bytes, in order, to the sink it
// is given (a large file is never held whole in memory).
using ByteSink = std::function<void(const void* data, size_t bytes)>;
void write_file_atomic(const std::string& path, const std::function<void(const ByteSink&)>& produce);

}  // namespace amp
