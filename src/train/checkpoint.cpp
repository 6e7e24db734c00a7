#include "train/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/hash.h"
#include "train/metrics.h"

namespace amp {

namespace {

constexpr char kMagic[8] = {'A', 'M', 'P', 'C', 'K', 'P', 'T', '\0'};
constexpr size_t kPrefix = 8 + 4 + 4 + 8;

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

}  // namespace

std::string save_checkpoint(const std::string& dir, const Checkpoint& ck, int keep) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) bad(dir, "cannot create the checkpoint folder: " + ec.message());
  nlohmann::json header = ck.header;
  header["format"] = kCheckpointFormat;
  nlohmann::json sections = nlohmann::json::array();
  uint64_t offset = 0;
  for (const auto& [name, bytes] : ck.sections) {
    sections.push_back({{"name", name}, {"offset", offset}, {"bytes", bytes.size()}});
    offset += bytes.size();
  }
  header["sections"] = sections;
  const std::string h = header.dump();
  std::string out;
  out.reserve(kPrefix + h.size() + offset + 8);
  out.append(kMagic, sizeof kMagic);
  put<uint32_t>(out, kCheckpointFormat);
  put<uint32_t>(out, 0);
  put<uint64_t>(out, h.size());
  out += h;
  for (const auto& [name, bytes] : ck.sections) out.append(bytes.data(), bytes.size());
  put<uint64_t>(out, hash64(out.data(), out.size()));
  const std::string path = (std::filesystem::path(dir) / file_name(ck.step())).string();
  write_file_atomic(path, out);
  // Keep the newest `keep`; the one just written is among them.
  const std::vector<std::string> all = list_checkpoints(dir);
  for (size_t i = size_t(std::max(keep, 1)); i < all.size(); ++i) std::filesystem::remove(all[i], ec);
  return path;
}

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) bad(path, std::string("cannot open: ") + std::strerror(errno));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

Checkpoint load_checkpoint(const std::string& path) { return parse_checkpoint(read_file_bytes(path), path); }

Checkpoint parse_checkpoint(const std::string& data, const std::string& path) {
  if (data.size() < kPrefix + 8) bad(path, strcat("truncated: ", data.size(), " bytes is shorter than any checkpoint"));
  if (std::memcmp(data.data(), kMagic, sizeof kMagic) != 0) bad(path, "not an amp_ddp checkpoint (bad magic)");
  const uint32_t format = get<uint32_t>(data, 8);
  if (format != kCheckpointFormat)
    bad(path, strcat("checkpoint format ", format, " is not supported by this program (format ", kCheckpointFormat, ")"));
  const uint64_t header_len = get<uint64_t>(data, 16);
  if (header_len > data.size() - kPrefix - 8) bad(path, "truncated: the header runs past the end of the file");
  const uint64_t stored = get<uint64_t>(data, data.size() - 8);
  const uint64_t actual = hash64(data.data(), data.size() - 8);
  Checkpoint ck;
  try {
    ck.header = nlohmann::json::parse(data.begin() + kPrefix, data.begin() + kPrefix + long(header_len));
  } catch (const std::exception& e) {
    bad(path, std::string("corrupted header: ") + e.what());
  }
  uint64_t payload = 0;
  try {
    for (const auto& s : ck.header.at("sections")) payload += s.at("bytes").get<uint64_t>();
  } catch (const std::exception& e) {
    bad(path, std::string("corrupted header: ") + e.what());
  }
  const uint64_t expected = kPrefix + header_len + payload + 8;
  if (data.size() < expected) bad(path, strcat("truncated: ", data.size(), " bytes, the header describes ", expected));
  if (data.size() > expected) bad(path, strcat("corrupted: ", data.size() - expected, " unexpected bytes after the data"));
  if (stored != actual) bad(path, strcat("checksum mismatch (stored ", hex64(stored), ", computed ", hex64(actual), "): the file is corrupted"));
  const size_t base = kPrefix + header_len;
  for (const auto& s : ck.header.at("sections")) {
    const size_t off = base + s.at("offset").get<size_t>(), n = s.at("bytes").get<size_t>();
    ck.sections[s.at("name").get<std::string>()] = std::vector<char>(data.begin() + long(off), data.begin() + long(off + n));
  }
  if (!ck.header.contains("step")) bad(path, "corrupted header: no step");
  return ck;
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt_step", 0) == 0 && name.size() > 4 && name.compare(name.size() - 4, 4, ".bin") == 0)
      out.push_back(e.path().string());
  }
  std::sort(out.rbegin(), out.rend());  // zero-padded step numbers: lexical order is step order
  return out;
}

std::string find_latest_intact(const std::string& dir, std::vector<std::string>* skipped) {
  for (const std::string& p : list_checkpoints(dir)) {
    try {
      load_checkpoint(p);
      return p;
    } catch (const Error& e) {
      if (skipped) skipped->push_back(e.what());
    }
  }
  return "";
}

}  // namespace amp
