// A language model's token stream: pieces in order, each either tokens held in memory (text read
// as bytes, test data) or the tokens of an llm.c shard read in place through a read-only memory
// map of the file (uint16 or uint32 as the shard stores them, never copied whole into memory).
// The stream copies ranges out widened to int32 (a batch's windows) and scans itself in bounded
// chunks (vocabulary checks, digests), releasing the mapped pages it scanned, so a rank's resident
// memory does not grow with the size of its shards.
//
// A shard that shrinks while it is mapped (truncated by another program) would make a read of the
// lost pages raise SIGBUS: the copies and scans catch it and throw a Data error naming the file.
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

  // Maps `count` tokens of `width` bytes (2: uint16, 4: uint32, little-endian) that start `offset`
  // bytes into the file at `path` (already validated: the file holds them). Throws a Data error
  // naming the file when it cannot be opened or mapped.
  static TokenStream mapped(const std::string& path, uint64_t offset, size_t count, int width);

  // Appends another stream's pieces (their memory or maps are shared, not copied).
  void append(const TokenStream& more);

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Tokens [begin, begin + n) into out (int32); the range must lie inside the stream.
  void copy(size_t begin, size_t n, int32_t* out) const;
  int32_t at(size_t i) const;
  std::vector<int32_t> to_vector() const;  // every token (tests, small streams)
  // The tokens [begin, end) as a stream of their own, sharing this one's memory and maps.
  TokenStream slice(size_t begin, size_t end) const;
  // Calls f(first, tokens, n) over the whole stream in order, chunks of at most 1 Mi tokens; a
  // mapped chunk's pages are released after f returns.
  void scan(const std::function<void(size_t first, const int32_t* tokens, size_t n)>& f) const;
  // The file (or name) holding token i and i's index in it, for messages.
  std::pair<std::string, size_t> where(size_t i) const;
  // Bytes of tokens held in this process's heap (mapped shards: 0), for reports and tests.
  size_t heap_bytes() const;
  bool mapped() const;  // some piece is a memory-mapped file

 private:
  struct Mapping;  // one file's map (munmap on destruction)
  struct Piece {
    std::shared_ptr<const std::vector<int32_t>> memory;  // in memory, or
    std::shared_ptr<const Mapping> map;                   // mapped
    size_t first = 0;  // the piece's first token: in memory an index, mapped a token of the map
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
