#include "data/token_stream.h"

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace amp {

namespace {

// SIGBUS from a mapped file that shrank: the thread reading it jumps back to its guarded copy.
thread_local sigjmp_buf* t_bus_jump = nullptr;
struct sigaction g_previous_bus {};

void on_sigbus(int sig, siginfo_t* info, void* ctx) {
  if (sigjmp_buf* j = t_bus_jump) {
    t_bus_jump = nullptr;
    siglongjmp(*j, 1);
  }
  // Not ours: what was there before (by default, the core dump of an invalid access).
  if (g_previous_bus.sa_flags & SA_SIGINFO) {
    if (g_previous_bus.sa_sigaction) return g_previous_bus.sa_sigaction(sig, info, ctx);
  } else if (g_previous_bus.sa_handler != SIG_DFL && g_previous_bus.sa_handler != SIG_IGN && g_previous_bus.sa_handler) {
    return g_previous_bus.sa_handler(sig);
  }
  signal(SIGBUS, SIG_DFL);
  raise(SIGBUS);
}

void install_bus_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &g_previous_bus);
  });
}

template <typename... Args>
[[noreturn]] void data_error(const std::string& path, const Args&... args) {
  throw Error(ErrorKind::Data, strcat("data error: ", path, ": ", args...));
}

constexpr size_t kScanChunk = size_t(1) << 20;  // tokens per scan chunk

}  // namespace

struct TokenStream::Mapping {
  std::string path;
  const uint8_t* base = nullptr;  // the whole file
  size_t bytes = 0;
  const uint8_t* tokens = nullptr;  // base + the tokens' offset
  int width = 2;
  ~Mapping() {
    if (base) munmap(const_cast<uint8_t*>(base), bytes);
  }
  // Drops this process's pages of tokens [first, first + n) (they stay in the page cache).
  void release(size_t first, size_t n) const {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const uintptr_t lo = reinterpret_cast<uintptr_t>(tokens + first * size_t(width)) / page * page;
    const uintptr_t hi = reinterpret_cast<uintptr_t>(tokens + (first + n) * size_t(width));
    if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
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

TokenStream TokenStream::mapped(const std::string& path, uint64_t offset, size_t count, int width) {
  AMP_CHECK(width == 2 || width == 4, "TokenStream::mapped: width ", width);
  install_bus_handler();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) data_error(path, "cannot open: ", std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    data_error(path, "cannot read its size: ", std::strerror(err));
  }
  const uint64_t need = offset + uint64_t(count) * uint64_t(width);
  if (uint64_t(st.st_size) < need) {
    ::close(fd);
    data_error(path, "truncated: ", st.st_size, " bytes, the tokens need ", need, " (did it change while being read?)");
  }
  auto m = std::make_shared<Mapping>();
  m->path = path;
  m->bytes = size_t(st.st_size);
  m->width = width;
  void* base = mmap(nullptr, m->bytes, PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);  // the map keeps the file
  if (base == MAP_FAILED) data_error(path, "cannot map it into memory: ", std::strerror(err));
  m->base = static_cast<const uint8_t*>(base);
  m->tokens = m->base + offset;
  TokenStream s;
  Piece p;
  p.map = std::move(m);
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
  if (p.memory) {
    std::memcpy(out, p.memory->data() + p.first + at, n * sizeof(int32_t));
    return;
  }
  const Mapping& m = *p.map;
  const uint8_t* src = m.tokens + (p.first + at) * size_t(m.width);
  sigjmp_buf jump;
  if (sigsetjmp(jump, 1) != 0)
    data_error(m.path, "changed while being read: its tokens were cut short after the run opened it (a shard must "
                       "not be rewritten or truncated during a run)");
  t_bus_jump = &jump;
  if (m.width == 2) {
    for (size_t i = 0; i < n; ++i) out[i] = int32_t(uint32_t(src[2 * i]) | (uint32_t(src[2 * i + 1]) << 8));
  } else {
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* b = src + 4 * i;
      out[i] = int32_t(uint32_t(b[0]) | (uint32_t(b[1]) << 8) | (uint32_t(b[2]) << 16) | (uint32_t(b[3]) << 24));
    }
  }
  t_bus_jump = nullptr;
  m.release(p.first + at, n);
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
  return {p.map ? p.map->path : p.name, p.file_first + (i - p.start)};
}

size_t TokenStream::heap_bytes() const {
  size_t b = 0;
  for (const Piece& p : pieces_)
    if (p.memory) b += p.count * sizeof(int32_t);
  return b;
}

bool TokenStream::mapped() const {
  return std::any_of(pieces_.begin(), pieces_.end(), [](const Piece& p) { return p.map != nullptr; });
}

}  // namespace amp
