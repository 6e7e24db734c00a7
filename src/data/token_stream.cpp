#include "data/token_stream.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace amp {

namespace {

template <typename... Args>
[[noreturn]] void data_error(const std::string& path, const Args&... args) {
  throw Error(ErrorKind::Data, strcat("data error: ", path, ": ", args...));
}

constexpr size_t kScanChunk = size_t(1) << 20;  // tokens per scan chunk

// A data set of many shards keeps a descriptor per shard: the soft limit on open files (often
// 1024) is raised to the hard one once.
void raise_open_file_limit() {
  static std::once_flag once;
  std::call_once(once, [] {
    rlimit r{};
    if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
      r.rlim_cur = r.rlim_max;
      setrlimit(RLIMIT_NOFILE, &r);
    }
  });
}

}  // namespace

struct TokenStream::ShardFile {
  std::string path;
  int fd = -1;
  uint64_t offset = 0;  // of the first token
  int width = 2;
  ~ShardFile() {
    if (fd >= 0) ::close(fd);
  }
  // Tokens [first, first + n) of the file into out, widened; a short read is a Data error.
  void read(size_t first, size_t n, int32_t* out) const {
    thread_local std::vector<uint8_t> buf;
    const size_t bytes = n * size_t(width);
    buf.resize(bytes);
    const uint64_t at = offset + uint64_t(first) * uint64_t(width);
    for (size_t done = 0; done < bytes;) {
      const ssize_t got = ::pread(fd, buf.data() + done, bytes - done, off_t(at + done));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) data_error(path, "read error at byte ", at + done, ": ", std::strerror(errno));
      if (got == 0) {
        struct stat st;
        const std::string now = ::fstat(fd, &st) == 0 ? strcat("it now has ", uint64_t(st.st_size), " bytes") : "it is shorter";
        data_error(path, "changed while being read: ", now, ", and the run reads byte ", at + done, " of the tokens it "
                         "opened it with (a shard must not be rewritten or truncated during a run)");
      }
      done += size_t(got);
    }
    const uint8_t* b = buf.data();
    if (width == 2) {
      for (size_t i = 0; i < n; ++i) out[i] = int32_t(uint32_t(b[2 * i]) | (uint32_t(b[2 * i + 1]) << 8));
    } else {
      for (size_t i = 0; i < n; ++i, b += 4)
        out[i] = int32_t(uint32_t(b[0]) | (uint32_t(b[1]) << 8) | (uint32_t(b[2]) << 16) | (uint32_t(b[3]) << 24));
    }
  }
};

TokenStream::TokenStream(std::vector<int32_t> tokens, std::string name) {
  if (tokens.empty()) return;
  Piece p;
  p.count = tokens.size();
  p.memory = std::make_shared<const std::vector<int32_t>>(std::move(tokens));
  p.name = std::move(name);
  pieces_.push_back(std::move(p));
  size_ = pieces_.back().count;
}

TokenStream TokenStream::in_file(const std::string& path, uint64_t offset, size_t count, int width) {
  AMP_CHECK(width == 2 || width == 4, "TokenStream::in_file: width ", width);
  raise_open_file_limit();
  auto f = std::make_shared<ShardFile>();
  f->path = path;
  f->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f->fd < 0) data_error(path, "cannot open: ", std::strerror(errno));
  struct stat st {};
  if (fstat(f->fd, &st) != 0) data_error(path, "cannot read its size: ", std::strerror(errno));
  const uint64_t need = offset + uint64_t(count) * uint64_t(width);
  if (uint64_t(st.st_size) < need)
    data_error(path, "truncated: ", st.st_size, " bytes, the tokens need ", need, " (did it change while being read?)");
  f->offset = offset;
  f->width = width;
  TokenStream s;
  Piece p;
  p.file = std::move(f);
  p.count = count;
  s.pieces_.push_back(std::move(p));
  s.size_ = count;
  return s;
}

void TokenStream::append(const TokenStream& more) {
  for (Piece p : more.pieces_) {
    p.start = size_;
    size_ += p.count;
    pieces_.push_back(std::move(p));
  }
}

size_t TokenStream::piece_of(size_t i) const {
  // The last piece starting at or before i.
  auto it = std::upper_bound(pieces_.begin(), pieces_.end(), i, [](size_t v, const Piece& p) { return v < p.start; });
  return size_t(it - pieces_.begin()) - 1;
}

void TokenStream::copy_piece(const Piece& p, size_t at, size_t n, int32_t* out) const {
  if (p.memory) std::memcpy(out, p.memory->data() + p.first + at, n * sizeof(int32_t));
  else p.file->read(p.first + at, n, out);
}

void TokenStream::copy(size_t begin, size_t n, int32_t* out) const {
  AMP_CHECK(begin <= size_ && n <= size_ - begin, "TokenStream::copy: tokens [", begin, ", ", begin + n,
            ") outside a stream of ", size_);
  if (n == 0) return;
  for (size_t k = piece_of(begin); n > 0; ++k) {
    const Piece& p = pieces_[k];
    const size_t at = begin - p.start, take = std::min(n, p.count - at);
    copy_piece(p, at, take, out);
    out += take, begin += take, n -= take;
  }
}

int32_t TokenStream::at(size_t i) const {
  int32_t t = 0;
  copy(i, 1, &t);
  return t;
}

std::vector<int32_t> TokenStream::to_vector() const {
  std::vector<int32_t> v(size_);
  copy(0, size_, v.data());
  return v;
}

TokenStream TokenStream::slice(size_t begin, size_t end) const {
  AMP_CHECK(begin <= end && end <= size_, "TokenStream::slice: [", begin, ", ", end, ") of ", size_);
  TokenStream s;
  if (begin == end) return s;
  for (size_t k = piece_of(begin); k < pieces_.size() && pieces_[k].start < end; ++k) {
    Piece p = pieces_[k];
    const size_t lo = std::max(begin, p.start), hi = std::min(end, p.start + p.count);
    p.first += lo - p.start;
    p.file_first += lo - p.start;
    p.count = hi - lo;
    p.start = s.size_;
    s.size_ += p.count;
    s.pieces_.push_back(std::move(p));
  }
  return s;
}

void TokenStream::scan(const std::function<void(size_t, const int32_t*, size_t)>& f) const {
  std::vector<int32_t> buf(std::min(kScanChunk, size_));
  for (size_t first = 0; first < size_; first += kScanChunk) {
    const size_t n = std::min(kScanChunk, size_ - first);
    copy(first, n, buf.data());
    f(first, buf.data(), n);
  }
}

std::pair<std::string, size_t> TokenStream::where(size_t i) const {
  if (i >= size_ || pieces_.empty()) return {"<tokens>", i};
  const Piece& p = pieces_[piece_of(i)];
  return {p.file ? p.file->path : p.name, p.file_first + (i - p.start)};
}

size_t TokenStream::heap_bytes() const {
  size_t b = 0;
  for (const Piece& p : pieces_)
    if (p.memory) b += p.count * sizeof(int32_t);
  return b;
}

bool TokenStream::in_files() const {
  return std::any_of(pieces_.begin(), pieces_.end(), [](const Piece& p) { return p.file != nullptr; });
}

}  // namespace amp
