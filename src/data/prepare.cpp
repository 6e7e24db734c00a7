#include "data/prepare.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "core/format.h"
#include "data/dataset.h"
#include "data/gpt2_bpe.h"
#include "data/tokenizer.h"

namespace amp {

namespace {

namespace fs = std::filesystem;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One split's shards: tokens are appended, a shard is closed (its header written) when it holds
// shard_tokens tokens or at the end. Every shard keeps its temporary name (NAME.bin.tmp, which no
// NAME_*.bin pattern matches) until commit(), after the whole input is encoded: a run stopped
// before then (an error, a signal) leaves no shard that training could take for a whole set.
class ShardWriter {
 public:
  ShardWriter(std::string dir, std::string prefix, uint64_t shard_tokens)
      : dir_(std::move(dir)), prefix_(std::move(prefix)), shard_tokens_(shard_tokens) {}
  ~ShardWriter() {  // an error unwound past commit(): the temporaries go
    if (out_.is_open()) out_.close();
    std::error_code ec;
    for (size_t i = committed_; i < files_.size(); ++i) fs::remove(files_[i] + ".tmp", ec);
    if (out_tmp_) fs::remove(tmp_, ec);
  }

  void append(const int32_t* t, size_t n) {
    while (n > 0) {
      if (!out_.is_open()) open();
      const size_t take = size_t(std::min<uint64_t>(n, shard_tokens_ - in_shard_));
      buf_.resize(take);
      for (size_t i = 0; i < take; ++i) buf_[i] = uint16_t(t[i]);
      out_.write(reinterpret_cast<const char*>(buf_.data()), std::streamsize(take * 2));
      if (!out_) fail("cannot write");
      in_shard_ += take, total_ += take, t += take, n -= take;
      if (in_shard_ == shard_tokens_) close();
    }
  }
  void finish() {
    if (out_.is_open()) close();
  }
  // The closed shards to their names, in order.
  void commit() {
    for (; committed_ < files_.size(); ++committed_) {
      std::error_code ec;
      fs::rename(files_[committed_] + ".tmp", files_[committed_], ec);
      if (ec) {
        tmp_ = files_[committed_] + ".tmp";
        fail(strcat("cannot rename to ", files_[committed_], ": ", ec.message()).c_str());
      }
    }
  }
  uint64_t total() const { return total_; }
  const std::vector<std::string>& files() const { return files_; }

 private:
  std::string path(size_t index) const {
    char n[16];
    std::snprintf(n, sizeof n, "%06zu", index);
    return (fs::path(dir_) / (prefix_ + n + ".bin")).string();
  }
  void open() {
    final_ = path(files_.size());
    tmp_ = final_ + ".tmp";
    out_.open(tmp_, std::ios::binary | std::ios::trunc);
    out_tmp_ = true;
    if (!out_) fail("cannot create");
    const std::vector<int32_t> header(kTokenShardHeaderInts, 0);
    out_.write(reinterpret_cast<const char*>(header.data()), std::streamsize(header.size() * 4));
    in_shard_ = 0;
  }
  void close() {
    int32_t header[3] = {kTokenShardMagic, kTokenShardVersion, int32_t(in_shard_)};
    out_.seekp(0);
    out_.write(reinterpret_cast<const char*>(header), sizeof header);
    out_.close();
    if (out_.fail()) fail("cannot write");
    out_tmp_ = false;
    files_.push_back(final_);  // still at final_ + ".tmp" until commit()
  }
  [[noreturn]] void fail(const char* what) {
    throw Error(ErrorKind::Output, strcat("output error: ", tmp_, ": ", what, " (disk full or not writable?)"));
  }

  std::string dir_, prefix_, final_, tmp_;
  uint64_t shard_tokens_, in_shard_ = 0, total_ = 0;
  size_t committed_ = 0;  // files_[0 .. committed_) have their names
  bool out_tmp_ = false;  // tmp_ is a shard being written (not in files_ yet)
  std::ofstream out_;
  std::vector<uint16_t> buf_;
  std::vector<std::string> files_;
};

// The shard name that prepare writes, NAME_train_NNNNNN.bin or NAME_val_NNNNNN.bin: its NAME and
// split ("train" or "val"). False for any other file name (with suffix: the same, NAME.bin + suffix).
bool parse_shard_name(const std::string& file, std::string& name, std::string& split, const std::string& suffix = "") {
  const std::string tail = ".bin" + suffix;
  if (file.size() < tail.size() + 6 || file.compare(file.size() - tail.size(), tail.size(), tail) != 0) return false;
  const size_t digits = file.size() - tail.size() - 6;
  for (size_t i = digits; i < digits + 6; ++i)
    if (file[i] < '0' || file[i] > '9') return false;
  for (const char* sp : {"train", "val"}) {
    const std::string mid = strcat("_", sp, "_");
    if (digits > mid.size() && file.compare(digits - mid.size(), mid.size(), mid) == 0) {
      name = file.substr(0, digits - mid.size());
      split = sp;
      return true;
    }
  }
  return false;
}

// The output folder before a run of --name `name`: no shards or info of that name (prepare never
// overwrites), no other data set in it whose patterns (P_train_*.bin, P_val_*.bin, as the summary
// prints them) would also match this run's shards, and no temporaries of an earlier run of this
// name that was stopped (removed: the folder's lock keeps other runs out).
void check_output_folder(const std::string& dir, const std::string& name) {
  std::vector<std::pair<std::string, std::string>> others;  // (NAME, a file of it)
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    std::string set, split;
    if ((n.rfind(name + "_train_", 0) == 0 || n.rfind(name + "_val_", 0) == 0 || n == name + "_info.json") &&
        n.find(".tmp") == std::string::npos)
      throw Error(ErrorKind::Output, strcat("output error: ", e.path().string(), ": already exists; prepare never overwrites ",
                                            "shards: remove them, or choose another --name or -o folder"));
    if (parse_shard_name(n, set, split, ".tmp") && set == name) {
      std::error_code ec;
      fs::remove(e.path(), ec);  // a shard of a stopped run of this name: never renamed, never used
    } else if (parse_shard_name(n, set, split)) {
      others.emplace_back(set, e.path().string());
    } else if (n.size() > 10 && n.compare(n.size() - 10, 10, "_info.json") == 0) {
      others.emplace_back(n.substr(0, n.size() - 10), e.path().string());
    }
  }
  for (const auto& [set, file] : others)
    for (const char* mine : {"_train_", "_val_"})
      for (const char* theirs : {"_train_", "_val_"})
        if ((name + mine).rfind(set + theirs, 0) == 0)
          throw Error(ErrorKind::Output,
                      strcat("output error: ", file, ": the data set \"", set, "\" in this folder would take this run's shards ",
                             "for its own (its pattern ", set, theirs, "*.bin matches ", name, mine, "000000.bin): choose ",
                             "another --name or -o folder"));
}

// A piece of a document to encode: its bytes, whether <|endoftext|> comes first, and where its
// first byte is in the whole input (the validation split is by input bytes).
struct Unit {
  std::string text;
  bool doc_start = false;
  uint64_t offset = 0;
  std::vector<int32_t> tokens;
};

// The bar (a terminal: redrawn in place) or a line per tenth of the input (a log).
class PrepareProgress {
 public:
  PrepareProgress(std::FILE* f, uint64_t total) : f_(f), total_(std::max<uint64_t>(total, 1)), tty_(f && isatty(fileno(f))) {}
  void update(uint64_t done, uint64_t tokens, double seconds, bool last) {
    if (!f_) return;
    const double frac = double(done) / double(total_);
    const int tenth = int(frac * 10);
    if (!tty_ && !last && tenth == last_tenth_) return;
    last_tenth_ = tenth;
    const double rate = seconds > 0 ? double(done) / seconds : 0;
    std::string bar;
    for (int i = 0; i < 30; ++i) bar += i < int(frac * 30) ? "#" : ".";
    const std::string line = strcat("prepare [", bar, "] ", format_bytes(double(done)), " / ", format_bytes(double(total_)), " | ",
                                    format_bytes(rate), "/s | ", tokens, " tokens",
                                    !last && rate > 0 ? strcat(" | ETA ", int(double(total_ - done) / rate), "s") : "");
    std::fprintf(f_, tty_ ? "\r%s\033[K%s" : "%s%s", line.c_str(), tty_ && !last ? "" : "\n");
    std::fflush(f_);
  }

 private:
  std::FILE* f_;
  uint64_t total_;
  bool tty_;
  int last_tenth_ = -1;
};

// The documents of one file: the whole text, or the parts between lines equal to `sep`.
std::vector<std::pair<size_t, size_t>> split_documents(const std::string& text, const std::string& sep) {
  std::vector<std::pair<size_t, size_t>> docs;  // [begin, end)
  if (sep.empty()) {
    docs.emplace_back(0, text.size());
    return docs;
  }
  size_t begin = 0, line = 0;
  while (line < text.size()) {
    size_t eol = text.find('\n', line);
    const size_t end = eol == std::string::npos ? text.size() : eol;
    if (text.compare(line, end - line, sep) == 0) {
      if (line > begin) docs.emplace_back(begin, line);
      begin = eol == std::string::npos ? text.size() : eol + 1;
    }
    line = eol == std::string::npos ? text.size() : eol + 1;
  }
  if (begin < text.size()) docs.emplace_back(begin, text.size());
  return docs;
}

}  // namespace

void check_prepared_shards(const std::vector<std::string>& train, const std::vector<std::string>& eval,
                           const std::string& tokenizer) {
  struct Info {
    std::string tokenizer;
    std::vector<std::string> train, val;  // file names
  };
  std::map<std::string, Info> infos;  // by the info file's path
  std::string first_tokenizer, first_shard, first_info;
  const auto names = [](const nlohmann::json& j, const char* key) {
    std::vector<std::string> out;
    if (j.contains(key) && j[key].is_array())
      for (const auto& x : j[key])
        if (x.is_string()) out.push_back(fs::path(x.get<std::string>()).filename().string());
    return out;
  };
  const auto error = [](const std::string& shard, const std::string& info, const auto&... what) {
    throw Error(ErrorKind::Data, strcat("data error: ", shard, ": ", what..., " (", info, ")"));
  };
  for (const auto& [files, key, training] :
       {std::tuple{&train, "data.train_tokens", true}, std::tuple{&eval, "data.eval_tokens", false}})
    for (const std::string& shard : *files) {
      const fs::path path(shard);
      std::string set, shard_split;
      if (!parse_shard_name(path.filename().string(), set, shard_split)) continue;
      const std::string info_path = (path.parent_path() / (set + "_info.json")).string();
      auto it = infos.find(info_path);
      if (it == infos.end()) {
        std::error_code ec;
        if (!fs::exists(info_path, ec)) continue;
        if (const std::string problem = regular_file_problem(info_path); !problem.empty())
          throw Error(ErrorKind::Data, strcat("data error: ", info_path, ": ", problem));
        std::ifstream in(info_path);
        const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
        if (j.is_discarded() || !j.is_object() || !j.contains("tokenizer") || !j["tokenizer"].is_string())
          throw Error(ErrorKind::Data, strcat("data error: ", info_path, ": not the JSON object with a \"tokenizer\" that ",
                                              "amp_ddp prepare writes beside its shards (", shard, " is one of them by its name)"));
        it = infos.emplace(info_path, Info{printable(j["tokenizer"].get<std::string>(), 40), names(j, "train_shards"),
                                           names(j, "val_shards")}).first;
      }
      const Info& info = it->second;
      const std::string file = path.filename().string();
      const auto listed = [&](const std::vector<std::string>& v) { return std::find(v.begin(), v.end(), file) != v.end(); };
      const bool in_train = listed(info.train), in_val = listed(info.val);
      if (!in_train && !in_val) error(shard, info_path, "not among the shards that prepare wrote for the data set \"", set, "\"");
      if (training && !in_train)
        error(shard, info_path, "a validation shard of the data set \"", set, "\", but ", key,
              " names it: its text would be trained on (does a pattern match more than it should?)");
      if (!training && !in_val)
        error(shard, info_path, "a training shard of the data set \"", set, "\", but ", key, " names it for evaluation");
      if (!tokenizer.empty() && info.tokenizer != tokenizer)
        error(shard, info_path, "made with the ", info.tokenizer, " tokenizer, but this run's data.tokenizer is ", tokenizer);
      if (first_shard.empty()) {
        first_tokenizer = info.tokenizer, first_shard = shard, first_info = info_path;
      } else if (info.tokenizer != first_tokenizer) {
        error(shard, info_path, "made with the ", info.tokenizer, " tokenizer, but ", first_shard, " with the ", first_tokenizer,
              " tokenizer (", first_info, "): one run's tokens must mean the same text");
      }
    }
}

size_t next_safe_cut(const std::string& text, size_t from) {
  const auto visible = [&](size_t i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    return c > 0x20 && c < 0x7F;
  };
  for (size_t p = std::max<size_t>(from, 2); p < text.size(); ++p)
    if (text[p - 1] == '\n' && visible(p - 2) && visible(p)) return p;
  return text.size();
}

PrepareResult prepare_shards(const PrepareOptions& opt, std::FILE* progress) {
  const auto t_load = std::chrono::steady_clock::now();
  if (opt.tokenizer != "gpt2" && opt.tokenizer != "bytes")
    throw Error(ErrorKind::Config, strcat("usage error: --tokenizer ", opt.tokenizer, ": expected gpt2 or bytes"));
  if (!(opt.val_fraction >= 0 && opt.val_fraction < 1))
    throw Error(ErrorKind::Config, strcat("usage error: --val-fraction ", opt.val_fraction, ": expected a number in [0, 1)"));
  if (opt.shard_tokens == 0 || opt.shard_tokens > uint64_t(INT32_MAX))
    throw Error(ErrorKind::Config, strcat("usage error: --shard-tokens ", opt.shard_tokens, ": expected 1 .. ", INT32_MAX,
                                          " (a shard header counts tokens in an int32)"));
  if (opt.doc_separator.find('\n') != std::string::npos)
    throw Error(ErrorKind::Config, strcat("usage error: --doc-separator \"", printable(opt.doc_separator),
                                          "\": expected one line, without a line break (it is compared with each line)"));
  if (opt.name.empty() || opt.name.find('/') != std::string::npos)
    throw Error(ErrorKind::Config, strcat("usage error: --name \"", opt.name, "\": expected a file name prefix without '/'"));
  const std::vector<std::string> files = expand_paths(opt.inputs, "prepare's input");
  const std::shared_ptr<const Tokenizer> tok = make_tokenizer(opt.tokenizer);
  PrepareResult r;
  r.load_seconds = seconds_since(t_load);
  const auto t0 = std::chrono::steady_clock::now();

  // The output: a folder (made when missing) without shards of this name.
  std::error_code ec;
  fs::create_directories(opt.out_dir, ec);
  if (!fs::is_directory(opt.out_dir))
    throw Error(ErrorKind::Output, strcat("output error: ", opt.out_dir, ": not a folder that can be created",
                                          ec ? strcat(" (", ec.message(), ")") : ""));
  check_output_folder(opt.out_dir, opt.name);

  for (const std::string& f : files) r.bytes += fs::file_size(f, ec);
  const uint64_t val_bytes = uint64_t(std::floor(opt.val_fraction * double(r.bytes)));
  ShardWriter train(opt.out_dir, opt.name + "_train_", opt.shard_tokens), val(opt.out_dir, opt.name + "_val_", opt.shard_tokens);
  const int threads = opt.threads > 0 ? opt.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  const auto* gpt2 = dynamic_cast<const Gpt2Bpe*>(tok.get());
  std::vector<std::unique_ptr<Gpt2Bpe::Encoder>> encoders;
  for (int i = 0; gpt2 && i < threads; ++i) encoders.push_back(std::make_unique<Gpt2Bpe::Encoder>(*gpt2));
  PrepareProgress bar(progress, r.bytes);

  uint64_t done = 0;  // input bytes consumed
  std::vector<Unit> batch;
  size_t batch_bytes = 0;
  const auto flush = [&] {
    // Encode in parallel (thread i takes units i, i + threads, ...), then write in order.
    // A worker's exception (out of memory, say) is rethrown here, after every worker has ended.
    std::vector<std::thread> pool;
    std::vector<std::exception_ptr> failed(static_cast<size_t>(threads));
    for (int w = 0; w < threads; ++w)
      pool.emplace_back([&, w] {
        try {
          for (size_t u = size_t(w); u < batch.size(); u += size_t(threads)) {
            Unit& x = batch[u];
            if (x.doc_start && tok->end_of_text() >= 0) x.tokens.push_back(tok->end_of_text());
            if (gpt2) {
              encoders[size_t(w)]->encode(x.text, x.tokens);  // its cache of pieces kept across units
            } else {
              const std::vector<int32_t> t = tok->encode(x.text);
              x.tokens.insert(x.tokens.end(), t.begin(), t.end());
            }
          }
        } catch (...) {
          failed[size_t(w)] = std::current_exception();
        }
      });
    for (auto& t : pool) t.join();
    for (const std::exception_ptr& e : failed)
      if (e) std::rethrow_exception(e);
    for (Unit& x : batch) {
      // Tokens whose first byte lies before val_bytes are validation tokens.
      size_t n_val = 0;
      if (x.offset + x.text.size() <= val_bytes) {
        n_val = x.tokens.size();
      } else if (x.offset < val_bytes) {
        uint64_t at = x.offset;
        while (n_val < x.tokens.size() && at < val_bytes) {
          const int32_t t = x.tokens[n_val];
          at += t == tok->end_of_text() ? 0 : tok->decode_bytes({t}).size();
          ++n_val;
        }
      }
      val.append(x.tokens.data(), n_val);
      train.append(x.tokens.data() + n_val, x.tokens.size() - n_val);
      done = x.offset + x.text.size();
    }
    batch.clear();
    batch_bytes = 0;
    bar.update(done, train.total() + val.total(), seconds_since(t0), false);
  };

  uint64_t file_offset = 0;
  for (const std::string& path : files) {
    const std::string text = read_text_file(path);
    const uint64_t size = text.size();
    for (const auto& [b, e] : split_documents(text, opt.doc_separator)) {
      ++r.documents;
      for (size_t p = b; p < e;) {
        const size_t cut = p + opt.chunk_bytes >= e ? e : std::min(e, next_safe_cut(text, p + opt.chunk_bytes));
        batch.push_back(Unit{text.substr(p, cut - p), p == b, file_offset + p, {}});
        batch_bytes += cut - p;
        p = cut;
        if (batch_bytes >= opt.chunk_bytes * size_t(threads) * 2) flush();
      }
    }
    file_offset += size;
  }
  flush();
  done = r.bytes;  // with the separator lines after the last document
  val.finish();
  train.finish();
  bar.update(done, train.total() + val.total(), seconds_since(t0), true);
  r.train_tokens = train.total();
  r.val_tokens = val.total();
  r.train_files = train.files();
  r.val_files = val.files();
  r.seconds = seconds_since(t0);

  nlohmann::json info = {{"tokenizer", opt.tokenizer},
                         {"vocab_size", tok->vocab_size()},
                         {"inputs", files},
                         {"input_bytes", r.bytes},
                         {"documents", r.documents},
                         {"doc_separator", opt.doc_separator},
                         {"val_fraction", opt.val_fraction},
                         {"train_tokens", r.train_tokens},
                         {"val_tokens", r.val_tokens},
                         {"train_shards", r.train_files},
                         {"val_shards", r.val_files}};
  const std::string info_path = (fs::path(opt.out_dir) / (opt.name + "_info.json")).string();
  try {
    val.commit();
    train.commit();
    write_file_atomic(info_path, info.dump(2) + "\n");
  } catch (const Error&) {  // all or nothing: shards already in place go too (the rest are temporaries)
    std::error_code ec;
    for (const auto* list : {&r.val_files, &r.train_files})
      for (const std::string& f : *list) fs::remove(f, ec);
    throw;
  }
  return r;
}

}  // namespace amp
