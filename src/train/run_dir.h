// The run's output folders before training starts: an exclusive lock (two runs given the same
// folder would interleave their files) and a writability and free-space check (an unwritable
// folder must not be discovered at the first checkpoint, after hours of training).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/format.h"

namespace amp {

// flock() on DIR/.amp_ddp.lock, held until destruction. Throws Error(Config) naming `key` when
// another process holds it (its pid and host, as written in the lock file), Error(Output) when the
// folder cannot be created or locked. A run refused before it wrote anything leaves no trace:
// destruction removes the lock file if this lock made it and the run never wrote (started(): its
// run.json), or the folder holds nothing but the lock file; then the folders this lock made, while
// empty. (A refused run's lock file in a folder of another run's files was left behind.)
class RunDirLock {
 public:
  RunDirLock(const std::string& dir, const std::string& key);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  void started() { started_ = true; }  // the run has written its files: the lock file stays

 private:
  std::string dir_, path_;
  int fd_ = -1;
  bool started_ = false;
  bool made_file_ = false;             // the lock file did not exist before
  std::vector<std::string> made_dirs_;  // the folders that did not exist before, innermost first
};

// Creates dir, writes, syncs and removes a probe file, and checks that the file system has at
// least need_bytes free. Throws Error(Output) naming `key` and the folder (exit 8), Error(Config)
// when the path is not a folder.
void check_writable(const std::string& dir, const std::string& key, uint64_t need_bytes);

// Removes the temporary files of atomic writes (NAME.tmp.<pid>) left in dir by a process that was
// killed mid-write; call it holding dir's lock (no other run writes there). Returns their names.
std::vector<std::string> remove_stale_temporaries(const std::string& dir);

}  // namespace amp
