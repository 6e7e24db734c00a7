// A language model's token stream: pieces in order, each either tokens held in memory (text read
// as bytes, test data) or the tokens of an llm.c shard left in its file (uint16 or uint32 as the
// shard stores them, never copied whole into memory). The stream copies ranges out widened to
// int32 (a batch's windows: one pread(2) of the range per file it touches) and scans itself in
// bounded chunks (vocabulary checks, digests), so a rank's resident memory does not grow with the
// size of its shards; the kernel's page cache holds what was read, shared by the ranks of a node.
//
// Why not a memory map: measured on Linux 6.18, a map's random window reads each mapped a whole
// large page-cache folio (the resident memory grew by 1.5 GiB over 32000 windows of 130 bytes)
// unless every read was followed by an madvise(MADV_DONTNEED), and then a batch of 16 windows took
// 720 us; pread takes a few microseconds, maps nothing, and a shard cut short while being read is
// a short read (a Data error naming the file), not a SIGBUS (bench/bench_token_stream.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace amp {

class TokenStream {
 public:
  TokenStream() = default;
  // Tokens held in memory; name: where they came from (a file), for messages.
  explicit TokenStream(std::vector<int32_t> tokens, std::string name = "<tokens>");

  // `count` tokens of `width` bytes (2: uint16, 4: uint32, little-endian) that start `offset`
  // bytes into the file at `path` (already validated: the file holds them), read from the file
  // when needed (it stays open). Throws a Data error naming the file when it cannot be opened.
  static TokenStream in_file(const std::string& path, uint64_t offset, size_t count, int width);

  // Appends another stream's pieces (their memory or files are shared, not copied).
  void append(const TokenStream& more);

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Tokens [begin, begin + n) into out (int32); the range must lie inside the stream.
  void copy(size_t begin, size_t n, int32_t* out) const;
  int32_t at(size_t i) const;
  std::vector<int32_t> to_vector() const;  // every token (tests, small streams)
  // The tokens [begin, end) as a stream of their own, sharing this one's memory and files.
  TokenStream slice(size_t begin, size_t end) const;
  // Calls f(first, tokens, n) over the whole stream in order, chunks of at most 1 Mi tokens.
  void scan(const std::function<void(size_t first, const int32_t* tokens, size_t n)>& f) const;
  // The file (or name) holding token i and i's index in it, for messages.
  std::pair<std::string, size_t> where(size_t i) const;
  // Bytes of tokens held in this process's heap (tokens in files: 0), for reports and tests.
  size_t heap_bytes() const;
  bool in_files() const;  // some piece is read from a file

 private:
  struct ShardFile;  // an open shard (closed on destruction)
  struct Piece {
    std::shared_ptr<const std::vector<int32_t>> memory;  // in memory, or
    std::shared_ptr<const ShardFile> file;                // in a file
    size_t first = 0;  // the piece's first token: in memory an index, in a file a token of the file
    size_t count = 0;
    size_t start = 0;  // where the piece begins in this stream
    size_t file_first = 0;  // the piece's first token's index in its file (messages)
    std::string name;       // in memory: where the tokens came from (messages)
  };
  size_t piece_of(size_t i) const;  // the piece holding token i
  void copy_piece(const Piece& p, size_t at, size_t n, int32_t* out) const;

  std::vector<Piece> pieces_;
  size_t size_ = 0;
};

}  // namespace amp
