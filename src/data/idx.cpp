// IDX files (LeCun's format), raw or gzip through zlib: read_idx() and load_idx_dataset().
// The file is streamed in large chunks and decoded chunk by chunk, so a 47 MB image file never
// sits in memory twice; every failure is a Data error naming the file and the place.
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/files.h"
#include "data/dataset.h"

namespace amp {
namespace {

template <typename... Args>
[[noreturn]] void data_error(const std::string& path, const Args&... args) {
  throw Error(ErrorKind::Data, strcat("data error: ", path, ": ", args...));
}

struct IdxType {
  uint8_t code;
  const char* name;
  size_t size;  // bytes per element
  bool integer;
};

const IdxType* find_idx_type(uint8_t code) {
  static const IdxType kTypes[] = {{0x08, "u8", 1, true},   {0x09, "i8", 1, true},
                                   {0x0B, "i16", 2, true},  {0x0C, "i32", 4, true},
                                   {0x0D, "f32", 4, false}, {0x0E, "f64", 8, false}};
  for (const IdxType& t : kTypes)
    if (t.code == code) return &t;
  return nullptr;
}

std::string hex_byte(unsigned v) {
  static const char* kDigits = "0123456789abcdef";
  return strcat("0x", kDigits[(v >> 4) & 15], kDigits[v & 15]);
}

std::string shape_string(const std::vector<size_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "x" : "") + std::to_string(dims[i]);
  return s;
}

// A gzFile that reports every zlib failure as a Data error. gzread reads plain files
// transparently, so the format is recognized by the gzip magic, never by the file name.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    // open() succeeds on a directory and only read() fails, with a less helpful message; opening a
    // FIFO waits for a writer.
    if (const std::string problem = regular_file_problem(path); !problem.empty()) data_error(path_, problem);
    errno = 0;
    file_ = gzopen(path.c_str(), "rb");
    if (!file_) data_error(path_, "cannot open: ", errno ? std::strerror(errno) : "out of memory");
    // The default 8 KiB buffers make decompression call read() thousands of times.
    gzbuffer(file_, 1u << 20);
  }
  ~GzReader() {
    if (file_) gzclose_r(file_);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to n bytes; fewer only when the data ends.
  size_t read(void* buf, size_t n) {
    size_t got = 0;
    while (got < n) {
      const unsigned want = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
      const int r = gzread(file_, static_cast<char*>(buf) + got, want);
      if (r < 0) report_error();
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    // A gzip stream cut short is not an error for gzread (it returns what it has and records
    // Z_BUF_ERROR), so the end of the data is checked explicitly.
    if (got < n) {
      int err = Z_OK;
      gzerror(file_, &err);
      if (err != Z_OK) report_error();
    }
    return got;
  }

 private:
  [[noreturn]] void report_error() {
    int err = Z_OK;
    const char* raw = gzerror(file_, &err);
    std::string msg = raw ? raw : "";
    // zlib prefixes its messages with the path it was given; the path is already in ours.
    const std::string prefix = path_ + ": ";
    if (msg.compare(0, prefix.size(), prefix) == 0) msg.erase(0, prefix.size());
    switch (err) {
      case Z_ERRNO:
        data_error(path_, "read error: ", std::strerror(errno));
      case Z_BUF_ERROR:
        data_error(path_, "corrupt gzip stream: ", msg, " (the compressed file is truncated)");
      case Z_MEM_ERROR:
        data_error(path_, "out of memory while decompressing");
      default:
        data_error(path_, "corrupt gzip stream: ", msg);
    }
  }

  std::string path_;
  gzFile file_ = nullptr;
};

struct IdxHeader {
  std::vector<size_t> dims;
  const IdxType* type = nullptr;
  size_t count = 0;  // elements
  size_t bytes = 0;  // bytes of data
};

// Reads the header, then hands the data to on_chunk(const uint8_t* bytes, size_t n_elements)
// in order, in chunks of whole elements. on_header(const IdxHeader&) may reject the file before
// any data is read. Truncation and trailing bytes are errors.
template <typename OnHeader, typename OnChunk>
void stream_idx(const std::string& path, OnHeader&& on_header, OnChunk&& on_chunk) {
  GzReader in(path);
  uint8_t magic[4];
  const size_t got_magic = in.read(magic, 4);
  if (got_magic == 0) data_error(path, "empty file (expected the IDX magic 00 00 <type> <ndim>)");
  if (got_magic < 4)
    data_error(path, "truncated: the file ends after ", got_magic,
               " bytes, inside the 4-byte IDX magic 00 00 <type> <ndim>");
  if (magic[0] != 0 || magic[1] != 0) {
    std::string hex = "0x";
    for (uint8_t b : magic) hex += hex_byte(b).substr(2);
    data_error(path, "bad IDX magic ", hex, " (expected 00 00 <type> <ndim>)");
  }
  IdxHeader h;
  h.type = find_idx_type(magic[2]);
  if (!h.type)
    data_error(path, "unknown IDX element type ", hex_byte(magic[2]),
               " (expected 0x08 u8, 0x09 i8, 0x0b i16, 0x0c i32, 0x0d f32 or 0x0e f64)");
  const size_t ndim = magic[3];
  if (ndim == 0) data_error(path, "empty: the header declares 0 dimensions");

  std::vector<uint8_t> size_bytes(4 * ndim);
  const size_t got_sizes = in.read(size_bytes.data(), size_bytes.size());
  if (got_sizes < size_bytes.size())
    data_error(path, "truncated: the header declares ", ndim, " dimensions (", 4 * ndim,
               " bytes of sizes) but the file ends after ", got_sizes, " of those bytes");
  h.dims.resize(ndim);
  for (size_t i = 0; i < ndim; ++i) {
    const uint8_t* p = &size_bytes[4 * i];
    h.dims[i] = (size_t(p[0]) << 24) | (size_t(p[1]) << 16) | (size_t(p[2]) << 8) | size_t(p[3]);
  }
  for (size_t i = 0; i < ndim; ++i)
    if (h.dims[i] == 0)
      data_error(path, "empty: dimension ", i, " of shape ", shape_string(h.dims), " is 0");
  // The element count must fit in memory both as stored and as floats (8 bytes covers both).
  const size_t max_count = std::numeric_limits<size_t>::max() / 8;
  h.count = 1;
  for (size_t d : h.dims) {
    if (h.count > max_count / d)
      data_error(path, "size overflow: shape ", shape_string(h.dims), " ", h.type->name,
                 " has too many elements");
    h.count *= d;
  }
  h.bytes = h.count * h.type->size;
  on_header(static_cast<const IdxHeader&>(h));

  // 4 MiB chunks: a multiple of every element size, large enough for zlib to run at full speed.
  constexpr size_t kChunk = size_t(4) << 20;
  std::vector<uint8_t> buf(std::min(kChunk, h.bytes));
  size_t done = 0;
  while (done < h.bytes) {
    const size_t want = std::min(kChunk, h.bytes - done);
    const size_t got = in.read(buf.data(), want);
    if (got < want)
      data_error(path, "truncated: header says ", shape_string(h.dims), " ", h.type->name, " (",
                 h.bytes, " bytes of data) but the file ends after ", done + got,
                 " bytes of data");
    on_chunk(static_cast<const uint8_t*>(buf.data()), want / h.type->size);
    done += want;
  }
  uint8_t extra[4096];
  size_t trailing = 0;
  for (size_t got; (got = in.read(extra, sizeof extra)) > 0;) trailing += got;
  if (trailing > 0)
    data_error(path, "trailing garbage: ", trailing, " bytes after the ", h.bytes,
               " bytes of data that the header declares (", shape_string(h.dims), " ",
               h.type->name, ")");
}

inline uint32_t be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

// Big-endian elements of the given type to T (float for data, int64_t for labels).
template <typename T>
void decode_idx(uint8_t code, const uint8_t* p, size_t n, T* out) {
  switch (code) {
    case 0x08:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(p[i]);
      break;
    case 0x09:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(static_cast<int8_t>(p[i]));
      break;
    case 0x0B:
      for (size_t i = 0; i < n; ++i)
        out[i] = static_cast<T>(static_cast<int16_t>(uint16_t((p[2 * i] << 8) | p[2 * i + 1])));
      break;
    case 0x0C:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(static_cast<int32_t>(be32(p + 4 * i)));
      break;
    case 0x0D:
      for (size_t i = 0; i < n; ++i) {
        const uint32_t bits = be32(p + 4 * i);
        float f;
        std::memcpy(&f, &bits, 4);
        out[i] = static_cast<T>(f);
      }
      break;
    case 0x0E:
      for (size_t i = 0; i < n; ++i) {
        const uint64_t bits = (uint64_t(be32(p + 8 * i)) << 32) | be32(p + 8 * i + 4);
        double d;
        std::memcpy(&d, &bits, 8);
        out[i] = static_cast<T>(d);
      }
      break;
    default:
      AMP_CHECK(false, "unhandled IDX type ", int(code));
  }
}

// Streams an IDX file into a vector, growing it as data arrives: a header that lies about a
// huge size fails as "truncated" instead of as a failed allocation.
template <typename T, typename OnHeader>
std::vector<T> read_idx_as(const std::string& path, IdxHeader& header, OnHeader&& check) {
  std::vector<T> data;
  stream_idx(
      path,
      [&](const IdxHeader& h) {
        check(h);
        header = h;
        data.reserve(std::min<size_t>(h.count, size_t(1) << 26));
      },
      [&](const uint8_t* bytes, size_t n) {
        const size_t at = data.size();
        data.resize(at + n);
        decode_idx(header.type->code, bytes, n, data.data() + at);
      });
  return data;
}

}  // namespace

IdxArray read_idx(const std::string& path) {
  IdxHeader h;
  IdxArray a;
  a.data = read_idx_as<float>(path, h, [](const IdxHeader&) {});
  a.dims = h.dims;
  a.type_code = h.type->code;
  return a;
}

Dataset load_idx_dataset(const std::string& images_path, const std::string& labels_path,
                         int n_classes) {
  if (n_classes < 0)
    data_error(labels_path, "the number of classes must be >= 0 (0 = infer), got ", n_classes);
  // Labels first: they are small, and a wrong labels file is found before the images load.
  IdxHeader lh;
  const std::vector<int64_t> raw_labels =
      read_idx_as<int64_t>(labels_path, lh, [&](const IdxHeader& h) {
        if (h.dims.size() != 1)
          data_error(labels_path, "labels must be a 1-D IDX array, got shape ",
                     shape_string(h.dims));
        if (!h.type->integer)
          data_error(labels_path, "labels must have an integer element type (u8, i8, i16 or "
                                  "i32), got ", h.type->name);
      });
  IdxArray images = read_idx(images_path);
  const size_t n = images.dims[0];
  if (raw_labels.size() != n)
    throw Error(ErrorKind::Data,
                strcat("data error: ", images_path, " has ", n, " samples (shape ",
                       shape_string(images.dims), ") but ", labels_path, " has ",
                       raw_labels.size(), " labels"));

  int64_t max_label = -1;
  for (size_t i = 0; i < n; ++i) {
    const int64_t v = raw_labels[i];
    if (n_classes > 0 && (v < 0 || v >= n_classes))
      data_error(labels_path, "element ", i, ": label ", v, " is out of range [0, ", n_classes,
                 ")");
    if (v < 0)
      data_error(labels_path, "element ", i, ": label ", v,
                 " is negative (labels must be in [0, n_classes))");
    max_label = std::max(max_label, v);
  }
  if (n_classes == 0) {
    if (max_label >= kMaxClasses)
      data_error(labels_path, "the largest label ", max_label, " would make ", max_label + 1,
                 " classes; at most ", kMaxClasses, " are supported");
    n_classes = static_cast<int>(max_label + 1);
  }

  Dataset d;
  d.source = images_path + " + " + labels_path;
  d.task = Task::Classification;
  d.n = n;
  d.n_features = images.data.size() / n;
  d.x = std::move(images.data);
  // u8 pixels are intensities 0..255; other element types carry their own scale.
  if (images.type_code == 0x08)
    for (float& v : d.x) v /= 255.0f;
  d.n_classes = n_classes;
  d.labels.resize(n);
  for (size_t i = 0; i < n; ++i) d.labels[i] = static_cast<int32_t>(raw_labels[i]);
  return d;
}

}  // namespace amp
