#include "core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace amp {

std::string file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "an unusual file type";
}

std::string file_kind(std::filesystem::file_type type) {
  using std::filesystem::file_type;
  switch (type) {
    case file_type::fifo: return "a FIFO";
    case file_type::directory: return "a directory";
    case file_type::socket: return "a socket";
    case file_type::character: return "a character device";
    case file_type::block: return "a block device";
    case file_type::not_found: return "a dangling symbolic link";
    default: return "an unusual file type";
  }
}

std::string regular_file_problem(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return std::string("cannot open: ") + std::strerror(errno);
  if (S_ISDIR(st.st_mode)) return "cannot open: Is a directory";
  if (!S_ISREG(st.st_mode)) return "not a regular file (" + file_kind(st.st_mode) + ")";
  return "";
}

ReadFile::ReadFile(const std::string& path, ErrorKind kind, std::string context)
    : kind_(kind), context_(std::move(context)) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) fail(std::string("cannot open: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("not a regular file (" + file_kind(st.st_mode) + ")");
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) fail(std::string("cannot open: ") + std::strerror(errno));
  const bool stated = ::fstat(fd_, &st) == 0;
  const int err = errno;
  if (!stated || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fail(stated ? "not a regular file (" + file_kind(st.st_mode) + ")" : std::string("cannot stat: ") + std::strerror(err));
  }
  size_ = uint64_t(st.st_size);
}

ReadFile::~ReadFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ReadFile::fail(const std::string& what) const { throw Error(kind_, context_ + what); }

void ReadFile::read(uint64_t offset, void* dst, size_t n) const {
  char* out = static_cast<char*>(dst);
  for (size_t done = 0; done < n;) {
    const ssize_t got = ::pread(fd_, out + done, n - done, off_t(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(std::string("read failed: ") + std::strerror(errno));
    if (got == 0)
      fail(strcat("truncated: the file ended at byte ", offset + done, " while being read (", size_, " bytes when opened)"));
    done += size_t(got);
  }
}

void write_file_atomic(const std::string& path, const std::string& data) {
  write_file_atomic(path, [&](const ByteSink& sink) { sink(data.data(), data.size()); });
}

void write_file_atomic(const std::string& path, const std::function<void(const ByteSink&)>& produce) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw Error(ErrorKind::Output, strcat("output error: ", tmp, ": cannot create: ", std::strerror(errno)));
  const auto write_all = [&](const void* data, size_t bytes) {
    const char* p = static_cast<const char*>(data);
    for (size_t done = 0; done < bytes;) {
      const ssize_t n = ::write(fd, p + done, bytes - done);
      if (n < 0) {
        const int err = errno;
        if (err == EINTR) continue;
        throw Error(ErrorKind::Output, strcat("output error: ", tmp, ": write failed: ", std::strerror(err)));
      }
      done += size_t(n);
    }
  };
  try {
    produce(write_all);
  } catch (...) {  // the producer's error or the write's: no temporary left behind
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(ErrorKind::Output, strcat("output error: ", tmp, ": fsync/close failed: ", std::strerror(err)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(ErrorKind::Output, strcat("output error: ", path, ": rename failed: ", std::strerror(err)));
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace amp
