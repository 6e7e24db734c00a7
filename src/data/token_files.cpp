// Token streams from files: expand_paths() (paths and glob patterns), read_text_tokens() (text as
// bytes, in memory) and read_token_shard() / read_token_shards() (llm.c's token shards, left in their files).
// Every failure is a Data error naming the file (or the pattern and its config key) and what is
// wrong.
#include <glob.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/files.h"
#include "data/dataset.h"
#include "data/tokenizer.h"

namespace amp {
namespace {

namespace fs = std::filesystem;

template <typename... Args>
[[noreturn]] void data_error(const std::string& path, const Args&... args) {
  throw Error(ErrorKind::Data, strcat("data error: ", path, ": ", args...));
}

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

// Opens a regular file for reading; a directory, a FIFO (opening it would wait for a writer), a
// missing or unreadable file is an error.
std::ifstream open_file(const std::string& path, uint64_t* size) {
  std::error_code ec;
  if (const std::string problem = regular_file_problem(path); !problem.empty()) data_error(path, problem);
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) data_error(path, "cannot open: ", errno ? std::strerror(errno) : "unknown error");
  const auto n = fs::file_size(path, ec);
  if (ec) data_error(path, "cannot read its size: ", ec.message());
  *size = uint64_t(n);
  return in;
}

// Reads exactly n bytes or fails naming what was being read.
void read_exact(std::ifstream& in, const std::string& path, void* buf, size_t n, uint64_t at, const char* what) {
  in.read(static_cast<char*>(buf), std::streamsize(n));
  const size_t got = size_t(in.gcount());
  if (got < n) {
    if (in.bad()) data_error(path, "read error at byte ", at + got, ": ", std::strerror(errno));
    data_error(path, "truncated: the file ends after ", at + got, " bytes, inside ", what);
  }
}

inline int32_t le32(const uint8_t* p) {
  return int32_t(uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24));
}

}  // namespace

std::vector<std::string> expand_paths(const std::vector<std::string>& patterns, const std::string& key) {
  if (patterns.empty()) throw Error(ErrorKind::Data, strcat("data error: ", key, ": no files given"));
  std::vector<std::string> out;
  for (const std::string& pattern : patterns) {
    if (pattern.empty()) throw Error(ErrorKind::Data, strcat("data error: ", key, ": an empty path"));
    // A path that exists is that file, even when its name holds glob characters ("notes[1].txt");
    // only a path that does not exist is a pattern.
    std::error_code ec;
    if (!has_glob_chars(pattern) || fs::exists(fs::symlink_status(pattern, ec))) {
      out.push_back(pattern);  // a missing file is reported by its reader
      continue;
    }
    // Sorted here by bytes: glob's own order follows the locale, which may differ between nodes.
    glob_t g{};
    const int rc = ::glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g);
    std::vector<std::string> matches;
    if (rc == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) matches.emplace_back(g.gl_pathv[i]);
    globfree(&g);
    if (rc == GLOB_NOSPACE) throw Error(ErrorKind::Data, strcat("data error: ", key, ": \"", pattern, "\": out of memory"));
    if (rc == GLOB_ABORTED)
      throw Error(ErrorKind::Data, strcat("data error: ", key, ": \"", pattern, "\": a folder cannot be read"));
    if (matches.empty())
      throw Error(ErrorKind::Data, strcat("data error: ", key, ": \"", pattern, "\" matches no file"));
    std::sort(matches.begin(), matches.end());
    out.insert(out.end(), matches.begin(), matches.end());
  }
  // The same file twice (named twice, or through a link) would count its tokens twice and could put
  // evaluation text into the training part.
  std::map<std::string, std::string> seen;
  for (const std::string& p : out) {
    std::error_code ec;
    const fs::path canon = fs::canonical(p, ec);
    const std::string id = ec ? p : canon.string();
    const auto [it, fresh] = seen.emplace(id, p);
    if (!fresh)
      throw Error(ErrorKind::Data,
                  strcat("data error: ", key, ": ", it->second, " and ", p, " are the same file",
                         it->second == p ? "" : strcat(" (", id, ")"),
                         "; name each file once (a glob must not match links to files it already matches)"));
  }
  return out;
}

std::string read_text_file(const std::string& path) {
  uint64_t size = 0;
  std::ifstream in = open_file(path, &size);
  if (size == 0) data_error(path, "empty file (a text file needs at least one byte)");
  std::string text(size_t(size), '\0');
  read_exact(in, path, text.data(), text.size(), 0, "its text (did it shrink while being read?)");
  if (const size_t nul = text.find('\0'); nul != std::string::npos)
    data_error(path, "byte ", nul, " (0-based) is NUL: not a text file (name text files only; list them ",
               "explicitly if a glob also matches binary files such as .dat indexes)");
  return text;
}

TokenStream read_text_tokens(const std::vector<std::string>& paths, const Tokenizer& tokenizer) {
  TokenStream tokens;
  for (const std::string& path : paths) {
    std::vector<int32_t> ids;
    if (tokenizer.end_of_text() >= 0) ids.push_back(tokenizer.end_of_text());
    const std::vector<int32_t> text = tokenizer.encode(read_text_file(path));
    ids.insert(ids.end(), text.begin(), text.end());
    tokens.append(TokenStream(std::move(ids), path));
  }
  return tokens;
}

TokenStream read_token_shard(const std::string& path) {
  uint64_t size = 0;
  std::ifstream in = open_file(path, &size);
  constexpr size_t kHeaderBytes = kTokenShardHeaderInts * 4;
  if (size == 0) data_error(path, "empty file (expected an llm.c token shard: a 1024-byte header, then the tokens)");
  if (size < kHeaderBytes)
    data_error(path, "truncated: ", size, " bytes, shorter than the ", kHeaderBytes, "-byte header of a token shard");
  uint8_t header[kHeaderBytes];
  read_exact(in, path, header, kHeaderBytes, 0, "the header");
  const int32_t magic = le32(header), version = le32(header + 4), count = le32(header + 8);
  if (magic != kTokenShardMagic && magic != kTokenShard32Magic)
    data_error(path, "bad magic ", magic, " (expected ", kTokenShardMagic, ", an llm.c GPT-2 token shard of uint16 tokens, or ",
               kTokenShard32Magic, ", an llm.c LLaMA 3 shard of uint32 tokens)");
  const bool wide = magic == kTokenShard32Magic;
  const int32_t want = wide ? kTokenShard32Version : kTokenShardVersion;
  if (version != want)
    data_error(path, "unsupported version ", version, " of magic ", magic, " (only version ", want, ", ",
               wide ? "uint32" : "uint16", " tokens, is read)");
  if (count < 0) data_error(path, "bad token count ", count, " in the header (negative)");
  if (count == 0) data_error(path, "empty: the header declares 0 tokens");
  const int width = wide ? 4 : 2;
  const uint64_t expected = uint64_t(kHeaderBytes) + uint64_t(width) * uint64_t(count);
  if (size < expected)
    data_error(path, "truncated: the header declares ", count, " tokens (", expected, " bytes with the header) but the file has ",
               size, " bytes");
  if (size > expected)
    data_error(path, "size mismatch: the header declares ", count, " tokens (", expected,
               " bytes with the header) but the file has ", size, " bytes (", size - expected, " bytes too many)");
  return TokenStream::in_file(path, kHeaderBytes, size_t(count), width);
}

TokenStream read_token_shards(const std::vector<std::string>& paths) {
  TokenStream tokens;
  for (const std::string& path : paths) tokens.append(read_token_shard(path));
  return tokens;
}

}  // namespace amp
