#include "train/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace amp {

namespace {

// The folder named is the wrong one (not a folder, in use): a config error (exit 2).
[[noreturn]] void fail(const std::string& key, const std::string& dir, const std::string& what) {
  throw Error(ErrorKind::Config, strcat("config error: ", key, ": ", dir, ": ", what));
}

// The folder cannot be written (permissions, read-only, full): an output error (exit 8).
[[noreturn]] void unwritable(const std::string& key, const std::string& dir, const std::string& what) {
  throw Error(ErrorKind::Output, strcat("output error: ", key, ": ", dir, ": ", what));
}

void make_dir(const std::string& dir, const std::string& key) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) unwritable(key, dir, "cannot create the folder: " + ec.message());
  if (!std::filesystem::is_directory(dir, ec)) fail(key, dir, "exists but is not a folder");
}

}  // namespace

RunDirLock::RunDirLock(const std::string& dir, const std::string& key) {
  make_dir(dir, key);
  const std::string path = dir + "/.amp_ddp.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) unwritable(key, dir, strcat("cannot create the lock file ", path, ": ", std::strerror(errno)));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[256] = {0};
    const ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      fail(key, dir,
           strcat("another run is using this folder (", n > 0 ? std::string(holder, size_t(n)) : std::string("lock held"),
                  "); give each run its own folder, or wait for that run to end"));
    unwritable(key, dir, strcat("cannot lock ", path, ": ", std::strerror(err)));
  }
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  const std::string who = strcat("pid ", ::getpid(), " on ", host);
  if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, who.data(), who.size(), 0) < 0) {
    // The lock holds without the note; only the message to a second run gets less precise.
  }
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (removing it would race)
}

void check_writable(const std::string& dir, const std::string& key, uint64_t need_bytes) {
  make_dir(dir, key);
  const std::string probe = strcat(dir, "/.amp_ddp_probe.", ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) unwritable(key, dir, strcat("not writable: ", std::strerror(errno)));
  const char byte = 0;
  const bool ok = ::write(fd, &byte, 1) == 1 && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  if (!ok) unwritable(key, dir, strcat("not writable: ", std::strerror(err)));
  struct statvfs st;
  if (need_bytes > 0 && ::statvfs(dir.c_str(), &st) == 0) {
    const double free_bytes = double(st.f_bavail) * double(st.f_frsize);
    if (free_bytes < double(need_bytes))
      unwritable(key, dir, strcat("only ", format_bytes(free_bytes), " free; a checkpoint of this run needs ",
                            format_bytes(double(need_bytes))));
  }
}

std::vector<std::string> remove_stale_temporaries(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), stop; !ec && it != stop; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const size_t at = name.rfind(".tmp.");
    if (at == std::string::npos || at == 0 || at + 5 == name.size()) continue;
    if (name.find_first_not_of("0123456789", at + 5) != std::string::npos) continue;
    std::error_code rec;
    if (it->is_regular_file(rec) && std::filesystem::remove(it->path(), rec)) removed.push_back(name);
  }
  return removed;
}

}  // namespace amp
