// Checkpoint writer and reader. The reader validates every prefix field, header field and section
// bound against the file before using it, with overflow-free arithmetic, so a hostile or damaged
// file can only produce Error(Checkpoint) naming the field.
#include "train/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include "core/error.h"
#include "core/files.h"
#include "core/format.h"
#include "core/hash.h"

namespace amp {

namespace {

using nlohmann::json;

constexpr char kMagic[8] = {'A', 'M', 'P', 'C', 'K', 'P', 'T', '\0'};
constexpr size_t kPrefix = 8 + 4 + 4 + 8;  // magic, format, flags, header bytes
constexpr size_t kTrailer = 8;             // hash64 of everything before it
// Deeper headers are refused: the parser is iterative, but copying, comparing or dumping a json value
// recurses, and whoever reads the header next (the trainer prints a mismatched "layout") should not
// have to guard its stack. The trainer's headers nest 3 levels (header, "layout", a tensor).
constexpr int kMaxHeaderDepth = 32;
constexpr char kNamePrefix[] = "ckpt_step";
constexpr char kNameSuffix[] = ".bin";

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <typename T>
T get(const std::string& in, size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof v);
  return v;
}

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::Checkpoint, "checkpoint error: " + path + ": " + what);
}

std::string file_name(int64_t step) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "ckpt_step%010lld.bin", static_cast<long long>(step));
  return buf;
}

// A JSON value for a message: scalars as written (long strings cut), containers by type only, since a
// hostile header may nest deep enough for a recursive dump() to exhaust the stack.
std::string describe(const json& v) {
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    const json cut = s.size() > 40 ? json(s.substr(0, 40) + "...") : v;
    return cut.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return v.dump();  // number, boolean, null
}

// obj[key] as an integer >= 0. JSON integers only: 3.0, "3" and true are refused, and so is a
// negative number however the parser stored it.
uint64_t get_count(const json& obj, const char* key, const std::string& field, const std::string& path) {
  const auto it = obj.find(key);
  if (it == obj.end()) bad(path, "header field " + field + ": missing");
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_number_integer() && it->get<int64_t>() >= 0) return uint64_t(it->get<int64_t>());
  bad(path, "header field " + field + ": expected an integer >= 0, got " + describe(*it));
}

int64_t header_step(const json& header, const std::string& path) {
  if (!header.is_object()) bad(path, "header: expected a JSON object, got " + describe(header));
  const uint64_t step = get_count(header, "step", "step", path);
  if (step > uint64_t(std::numeric_limits<int64_t>::max()))
    bad(path, strcat("header field step: ", step, " is out of range"));
  return int64_t(step);
}

struct FdCloser {
  int fd;
  ~FdCloser() { ::close(fd); }
};

// The step of a checkpoint file name as digits without leading zeros ("0" for step 0), "" if the
// name is not one. A step has at most 18 digits (always an int64_t): a longer number names no step
// (it was listed as the newest checkpoint, which rotation kept and resume refused).
std::string name_digits(const std::string& name) {
  const size_t np = sizeof kNamePrefix - 1, ns = sizeof kNameSuffix - 1;
  if (name.size() <= np + ns || name.compare(0, np, kNamePrefix) != 0 ||
      name.compare(name.size() - ns, ns, kNameSuffix) != 0)
    return "";
  std::string digits = name.substr(np, name.size() - np - ns);
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return "";
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size() - 1));
  return digits.size() <= 18 ? digits : "";
}

}  // namespace

int64_t name_step(const std::string& path) {
  const std::string digits = name_digits(std::filesystem::path(path).filename().string());
  return digits.empty() ? -1 : int64_t(std::stoll(digits));
}

int64_t Checkpoint::step() const { return header_step(header, path.empty() ? std::string("checkpoint header") : path); }

namespace {

// The file's bytes in order, handed to `sink` piece by piece (the sections where they are: never
// copied into one buffer).
void write_checkpoint(json header, const SectionViews& sections, const ByteSink& sink) {
  header["format"] = kCheckpointFormat;
  json table = json::array();
  uint64_t offset = 0;
  for (const auto& [name, view] : sections) {
    table.push_back({{"name", name}, {"offset", offset}, {"bytes", view.bytes}});
    offset += view.bytes;
  }
  header["sections"] = table;
  const std::string h = header.dump();
  std::string prefix;
  prefix.append(kMagic, sizeof kMagic);
  put<uint32_t>(prefix, kCheckpointFormat);
  put<uint32_t>(prefix, 0);
  put<uint64_t>(prefix, h.size());
  Hasher hasher;
  const auto emit = [&](const void* p, size_t n) {
    if (n == 0) return;
    hasher.update(p, n);
    sink(p, n);
  };
  emit(prefix.data(), prefix.size());
  emit(h.data(), h.size());
  for (const auto& [name, view] : sections) {
    if (view.data || !view.produce) {
      emit(view.data, view.bytes);
      continue;
    }
    // Made as it is written: exactly the bytes the table announced.
    size_t made = 0;
    const auto wrong = [&](size_t n) {
      return Error(ErrorKind::Internal, strcat("internal error: checkpoint section \"", name, "\" made ", n,
                                               " bytes, not the ", view.bytes, " its table entry says"));
    };
    view.produce([&](const void* p, size_t n) {
      if (n > view.bytes - made) throw wrong(made + n);
      made += n;
      emit(p, n);
    });
    if (made != view.bytes) throw wrong(made);
  }
  std::string trailer;
  put<uint64_t>(trailer, hasher.digest());
  sink(trailer.data(), trailer.size());
}

SectionViews views_of(const Checkpoint& ck) {
  AMP_CHECK(ck.in_file.empty(), "a checkpoint read with sections left in its file (", ck.path,
            ") cannot be written whole");
  SectionViews v;
  for (const auto& [name, bytes] : ck.sections) v[name] = SectionView{bytes.data(), bytes.size(), {}};
  return v;
}

}  // namespace

std::string serialize_checkpoint(const Checkpoint& ck) {
  std::string out;
  write_checkpoint(ck.header, views_of(ck), [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); });
  return out;
}

std::string save_checkpoint(const std::string& dir, const Checkpoint& ck, int keep) {
  return save_checkpoint(dir, ck.header, views_of(ck), keep);
}

std::string save_checkpoint(const std::string& dir, const nlohmann::json& header, const SectionViews& sections,
                            int keep) {
  const int64_t step = header_step(header, dir);  // before anything is written: it names the file
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(ErrorKind::Output, "output error: " + dir + ": cannot create the checkpoint folder: " + ec.message());
  const std::string path = (std::filesystem::path(dir) / file_name(step)).string();
  const std::string id = header.value("run_id", std::string());
  // Never over a file this run did not write: set-up moved other runs' and unreadable ones aside,
  // so one found here appeared since (or was put back).
  if (std::filesystem::exists(std::filesystem::symlink_status(path, ec))) {
    const CheckpointIdentity c = checkpoint_identity(path);
    if (!c.readable || c.run_id != id)
      throw Error(ErrorKind::Output,
                  strcat("output error: ", path, ": exists and is not a checkpoint of this run (",
                         !c.readable ? std::string("its header cannot be read")
                                     : c.run_id.empty() ? std::string("it has no run id") : "run " + c.run_id,
                         "); not overwritten: move it away and resume"));
  }
  write_file_atomic(path, [&](const ByteSink& sink) { write_checkpoint(header, sections, sink); });
  // Keep this run's newest `keep`; the one just written is among them. Only regular files are
  // listed, so a FIFO or folder that happens to carry a checkpoint's name is never removed, and only
  // this run's checkpoints count and go: another run's never (its run_id differs), nor a copy
  // renamed to another step (resume refuses it, so it must not push a real one out).
  size_t mine = 0;
  for (const std::string& p : list_checkpoints(dir)) {
    const CheckpointIdentity c = checkpoint_identity(p);
    if (c.run_id != id || c.step != name_step(p)) continue;
    if (++mine > size_t(std::max(keep, 1))) std::filesystem::remove(p, ec);
  }
  return path;
}

bool valid_run_id(const std::string& id) {
  if (id.size() != 16) return false;
  for (char c : id)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

CheckpointIdentity checkpoint_identity(const std::string& path) {
  // The fixed prefix and the JSON header only: the sections (the weights) are not read.
  CheckpointIdentity id;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return id;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return id;
  const FdCloser closer{fd};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return id;
  std::string prefix(kPrefix, '\0');
  if (::pread(fd, &prefix[0], kPrefix, 0) != ssize_t(kPrefix) || std::memcmp(prefix.data(), kMagic, sizeof kMagic) != 0)
    return id;
  const uint64_t header_len = get<uint64_t>(prefix, 16);
  if (header_len > uint64_t(st.st_size) || header_len > (uint64_t(64) << 20)) return id;
  std::string header(size_t(header_len), '\0');
  if (::pread(fd, &header[0], header.size(), off_t(kPrefix)) != ssize_t(header.size())) return id;
  const json j = json::parse(header, nullptr, false);
  if (!j.is_object()) return id;
  id.readable = true;
  const auto it = j.find("run_id");
  if (it != j.end() && it->is_string()) id.run_id = it->get<std::string>();
  const auto st_it = j.find("step");
  if (st_it != j.end() && st_it->is_number_integer() && st_it->get<int64_t>() >= 0) id.step = st_it->get<int64_t>();
  return id;
}

std::string checkpoint_run_id(const std::string& path) { return checkpoint_identity(path).run_id; }

std::string read_file_bytes(const std::string& path) {
  const ReadFile file(path, ErrorKind::Checkpoint, "checkpoint error: " + path + ": ");
  const int fd = file.fd();
  std::string out(size_t(file.size()), '\0');
  size_t done = 0;
  for (;;) {
    if (done == out.size()) out.resize(out.size() + (1 << 16));  // the file grew since fstat
    const ssize_t n = ::read(fd, &out[done], out.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      bad(path, std::string("read failed: ") + std::strerror(errno));
    }
    if (n == 0) break;
    done += size_t(n);
  }
  out.resize(done);
  return out;
}

namespace {

// The reader's one body for bytes in memory and for a file: read(offset, dst, n) copies n bytes
// of the input at offset (a file that ends early is a "truncated" error). Sections are copied
// straight from the input into the checkpoint, the checksum computed as they pass: reading a file
// holds its sections once, never the whole file beside them.
template <typename Read>
Checkpoint parse_from(uint64_t size, const Read& read, const std::string& path, const SectionStream* stream = nullptr) {
  // Fixed prefix. Every size below is checked against what is left, never summed first, so no
  // arithmetic on file-supplied numbers can wrap.
  if (size < kPrefix + kTrailer)
    bad(path, strcat("truncated: ", size, " bytes is shorter than any checkpoint (", kPrefix + kTrailer, ")"));
  std::string prefix(kPrefix, '\0');
  read(0, &prefix[0], kPrefix);
  if (std::memcmp(prefix.data(), kMagic, sizeof kMagic) != 0) bad(path, "not an amp_ddp checkpoint (bad magic)");
  const uint32_t format = get<uint32_t>(prefix, 8);
  if (format != kCheckpointFormat)
    bad(path, strcat("checkpoint format ", format, " is not supported by this program (format ", kCheckpointFormat, ")"));
  const uint32_t flags = get<uint32_t>(prefix, 12);
  if (flags != 0)
    bad(path, strcat("flags ", flags, " are not supported by this program (format ", format, " has none)"));
  const uint64_t header_len = get<uint64_t>(prefix, 16);
  const uint64_t room = size - kPrefix - kTrailer;  // header and sections
  if (header_len > room)
    bad(path, strcat("truncated: the header length (", header_len, " bytes) runs past the end of the file (",
                     size, " bytes)"));
  const uint64_t payload = room - header_len;  // the sections' bytes
  std::string text(size_t(header_len), '\0');
  read(kPrefix, &text[0], text.size());

  // Header.
  Checkpoint ck;
  ck.path = path;
  // `depth` counts the containers a new one opens in: 0 for the header object itself.
  const json::parser_callback_t depth_limit = [&](int depth, json::parse_event_t event, json&) {
    const bool opens = event == json::parse_event_t::object_start || event == json::parse_event_t::array_start;
    if (opens && depth >= kMaxHeaderDepth) bad(path, strcat("header: nested deeper than ", kMaxHeaderDepth, " levels"));
    return true;
  };
  try {
    ck.header = json::parse(text, depth_limit);
  } catch (const json::exception& e) {
    bad(path, "header is not valid JSON: " + printable(e.what(), 400));
  }
  json& h = ck.header;
  if (!h.is_object()) bad(path, "header: expected a JSON object, got " + describe(h));
  const auto fmt = h.find("format");
  if (fmt == h.end()) bad(path, "header field format: missing");
  if (!fmt->is_number_integer() || *fmt != format)
    bad(path, strcat("header field format: expected ", format, " (the format in the prefix), got ", describe(*fmt)));
  header_step(h, path);
  const auto secs = h.find("sections");
  if (secs == h.end()) bad(path, "header field sections: missing");
  if (!secs->is_array()) bad(path, "header field sections: expected an array, got " + describe(*secs));

  // Sections: end to end from 0, in order, exactly filling the payload. `end` <= payload throughout.
  struct Span {
    const std::string* name;
    uint64_t offset, bytes;
  };
  std::vector<Span> spans;
  std::set<std::string> names;
  uint64_t end = 0;
  for (size_t i = 0; i < secs->size(); ++i) {
    const json& s = (*secs)[i];
    const std::string field = strcat("sections[", i, "]");
    if (!s.is_object()) bad(path, "header field " + field + ": expected an object, got " + describe(s));
    const auto name = s.find("name");
    if (name == s.end()) bad(path, "header field " + field + ".name: missing");
    if (!name->is_string()) bad(path, "header field " + field + ".name: expected a string, got " + describe(*name));
    const std::string& n = name->get_ref<const std::string&>();
    if (!names.insert(n).second)
      bad(path, "header field " + field + ".name: " + describe(*name) + " names an earlier section too");
    const uint64_t offset = get_count(s, "offset", field + ".offset", path);
    const uint64_t bytes = get_count(s, "bytes", field + ".bytes", path);
    const std::string what = "header field " + field + " (section " + describe(*name) + "): ";
    if (offset > payload)
      bad(path, strcat(what, "offset ", offset, " is past the end of the sections (", payload, " bytes)"));
    if (offset < end) bad(path, strcat(what, "offset ", offset, " overlaps the previous section, which ends at ", end));
    if (offset > end)
      bad(path, strcat(what, "offset ", offset, " leaves a gap after the previous section, which ends at ", end));
    if (bytes > payload - offset)
      bad(path, strcat("truncated: ", what, offset, " + ", bytes, " bytes run past the end of the sections (",
                       payload, " bytes in this file)"));
    end = offset + bytes;
    spans.push_back({&n, offset, bytes});
  }
  if (end < payload) bad(path, strcat("corrupted: ", payload - end, " unexpected bytes after the last section"));

  // The sections fill the bytes between the header and the trailer: hashed in file order as read.
  Hasher hasher;
  hasher.update(prefix.data(), prefix.size());
  hasher.update(text.data(), text.size());
  const uint64_t base = kPrefix + header_len;
  std::vector<char> piece;  // sections streamed: one piece at a time
  for (const Span& sp : spans) {
    if (stream && stream->names.count(*sp.name)) {
      Hasher own;
      const size_t step = std::max<size_t>(stream->piece, 1);
      piece.resize(size_t(std::min<uint64_t>(sp.bytes, step)));
      stream->visit(*sp.name, 0, piece.data(), 0);
      for (uint64_t at = 0; at < sp.bytes; at += step) {
        const size_t n = size_t(std::min<uint64_t>(step, sp.bytes - at));
        read(base + sp.offset + at, piece.data(), n);
        hasher.update(piece.data(), n);
        own.update(piece.data(), n);
        stream->visit(*sp.name, at, piece.data(), n);
      }
      ck.in_file[*sp.name] = FileSection{base + sp.offset, sp.bytes, own.digest()};
      continue;
    }
    std::vector<char>& bytes = ck.sections[*sp.name];
    bytes.resize(size_t(sp.bytes));
    read(base + sp.offset, bytes.data(), bytes.size());
    hasher.update(bytes.data(), bytes.size());
  }
  std::string trailer(kTrailer, '\0');
  read(size - kTrailer, &trailer[0], kTrailer);
  const uint64_t stored = get<uint64_t>(trailer, 0);
  if (const uint64_t actual = hasher.digest(); stored != actual)
    bad(path, strcat("checksum mismatch (stored ", hex64(stored), ", computed ", hex64(actual), "): the file is corrupted"));
  return ck;
}

Checkpoint load_from_file(const std::string& path, const SectionStream* stream) {
  // Closes the descriptor when the last owner goes.
  const auto file = std::make_shared<const ReadFile>(path, ErrorKind::Checkpoint, "checkpoint error: " + path + ": ");
  const auto read = [&](uint64_t offset, char* dst, size_t n) { file->read(offset, dst, n); };
  Checkpoint ck = parse_from(file->size(), read, path, stream);
  if (!ck.in_file.empty()) ck.file = file;
  return ck;
}

}  // namespace

Checkpoint load_checkpoint(const std::string& path) { return load_from_file(path, nullptr); }

Checkpoint load_checkpoint(const std::string& path, const SectionStream& stream) { return load_from_file(path, &stream); }

SectionReader::SectionReader(const Checkpoint& ck, const std::string& name) : file_(ck.file), path_(ck.path), name_(name) {
  const auto it = ck.in_file.find(name);
  if (it == ck.in_file.end() || !file_) bad(path_, strcat("section \"", name, "\" is not left in the file to be read"));
  where_ = it->second;
}

void SectionReader::read(void* dst, size_t n) {
  if (n > where_.bytes - done_)
    bad(path_, strcat("section \"", name_, "\": ", n, " bytes asked at ", done_, " of its ", where_.bytes));
  file_->read(where_.offset + done_, dst, n);
  hasher_.update(dst, n);
  done_ += n;
}

void SectionReader::finish() const {
  if (done_ != where_.bytes)
    bad(path_, strcat("section \"", name_, "\": ", done_, " of its ", where_.bytes, " bytes read"));
  if (const uint64_t now = hasher_.digest(); now != where_.hash)
    bad(path_, strcat("changed while it was read: section \"", name_, "\" hashes to ", hex64(now), " now, to ",
                      hex64(where_.hash), " when the file was verified"));
}

Checkpoint parse_checkpoint(const std::string& data, const std::string& path) {
  const auto read = [&](uint64_t offset, char* dst, size_t n) {
    if (n > 0) std::memcpy(dst, data.data() + offset, n);  // an empty section's dst may be null
  };
  return parse_from(data.size(), read, path);
}

std::vector<std::string> list_checkpoints(const std::string& dir, std::vector<std::string>* skipped) {
  struct Entry {
    std::string digits, path;
  };
  std::vector<Entry> found;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), stop; !ec && it != stop; it.increment(ec)) {
    std::string digits = name_digits(it->path().filename().string());
    if (!digits.empty()) found.push_back({std::move(digits), it->path().string()});
  }
  // Newest step first: numeric order of the digits (shorter is smaller once leading zeros are gone).
  std::sort(found.begin(), found.end(), [](const Entry& a, const Entry& b) {
    if (a.digits.size() != b.digits.size()) return a.digits.size() > b.digits.size();
    return a.digits != b.digits ? a.digits > b.digits : a.path > b.path;
  });
  std::vector<std::string> out;
  for (const Entry& e : found) {
    // status() follows links: a link to a checkpoint is one; a FIFO, folder or device named like one is not.
    std::error_code sec;
    const std::filesystem::file_status st = std::filesystem::status(e.path, sec);
    if (std::filesystem::is_regular_file(st)) {
      out.push_back(e.path);
    } else if (skipped) {
      skipped->push_back("checkpoint error: " + e.path + ": " +
                         (sec && st.type() != std::filesystem::file_type::not_found
                              ? "cannot stat: " + sec.message()
                              : "not a regular file (" + file_kind(st.type()) + ")"));
    }
  }
  return out;
}

std::string find_latest_intact(const std::string& dir, std::vector<std::string>* skipped, const std::string& run_id,
                               Checkpoint* found, const SectionStream* stream) {
  for (const std::string& p : list_checkpoints(dir, skipped)) {
    try {
      Checkpoint ck = load_from_file(p, stream);
      const int64_t named = name_step(p);
      if (ck.step() != named) {
        if (skipped)
          skipped->push_back(strcat("checkpoint error: ", p, ": named step ", named, " but holds step ", ck.step(),
                                    " (renamed?); not resumed"));
        continue;
      }
      const auto it = ck.header.find("run_id");
      const std::string id = it != ck.header.end() && it->is_string() ? it->get<std::string>() : "";
      if (!run_id.empty() && id != run_id) {
        if (skipped)
          skipped->push_back(strcat("checkpoint error: ", p, ": written by ",
                                    id.empty() ? std::string("an earlier run (no run id)") : "run " + id,
                                    ", not by this folder's run ", run_id, " (run.json)"));
        continue;
      }
      if (found) *found = std::move(ck);
      return p;
    } catch (const Error& e) {
      if (skipped) skipped->push_back(e.what());
    }
  }
  return "";
}

}  // namespace amp
