#include "core/files.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

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

}  // namespace amp
