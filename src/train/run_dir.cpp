#include "train/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
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

// The folders on the way to dir that do not exist, innermost first.
std::vector<std::string> missing_dirs(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (std::filesystem::path p = std::filesystem::absolute(dir, ec).lexically_normal(); !ec && p.has_relative_path();
       p = p.parent_path()) {
    if (p.filename().empty()) continue;  // "a/b/": its last component is empty
    if (std::filesystem::symlink_status(p, ec).type() != std::filesystem::file_type::not_found) break;
    ec.clear();
    out.push_back(p.string());
  }
  return out;
}

// Whether dir holds exactly one entry, `name`.
bool holds_only(const std::string& dir, const std::string& name) {
  std::error_code ec;
  size_t n = 0;
  bool found = false;
  for (std::filesystem::directory_iterator it(dir, ec), stop; !ec && it != stop; it.increment(ec))
    ++n, found = found || it->path().filename() == name;
  return !ec && n == 1 && found;
}

constexpr const char* kLockName = ".amp_ddp.lock";

}  // namespace

RunDirLock::RunDirLock(const std::string& dir, const std::string& key) : dir_(dir), path_(dir + "/" + kLockName) {
  // A refused run that made the folder removes its lock file while it holds the lock (destructor):
  // a run that opened that file meanwhile and locks it once it is free holds a lock on a removed
  // file, so each lock taken is checked against the file the path names now, and taken again when
  // they differ.
  for (int attempt = 0;; ++attempt) {
    if (attempt == 100) unwritable(key, dir, strcat("the lock file ", path_, " keeps being replaced"));
    const std::vector<std::string> missing = missing_dirs(dir);
    make_dir(dir, key);
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    const bool made = fd_ >= 0;
    if (fd_ < 0 && errno == EEXIST) fd_ = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
    if (fd_ < 0 && errno == ENOENT) continue;  // removed since, its folder too, by a refused run
    if (fd_ < 0) unwritable(key, dir, strcat("cannot create the lock file ", path_, ": ", std::strerror(errno)));
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
      unwritable(key, dir, strcat("cannot lock ", path_, ": ", std::strerror(err)));
    }
    struct stat held, named;
    if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
        held.st_dev == named.st_dev) {
      made_file_ = made;
      made_dirs_ = missing;
      break;
    }
    ::close(fd_);
    fd_ = -1;
  }
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  const std::string who = strcat("pid ", ::getpid(), " on ", host);
  if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, who.data(), who.size(), 0) < 0) {
    // The lock holds without the note; only the message to a second run gets less precise.
  }
}

RunDirLock::~RunDirLock() {
  if (fd_ < 0) return;
  // The run was refused before it started, or wrote nothing beside the lock file. The lock file
  // goes while it is still held (see the constructor), then the folders this lock made, innermost
  // first, each only while empty.
  if (made_file_ && (!started_ || holds_only(dir_, kLockName)) && ::unlink(path_.c_str()) == 0)
    for (const std::string& d : made_dirs_)
      if (::rmdir(d.c_str()) != 0) break;
  ::close(fd_);  // releases the lock
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
