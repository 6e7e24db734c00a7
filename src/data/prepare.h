// Data preparation (`amp_ddp prepare`): text files -> llm.c token shards (data.format tokens).
//
// Documents are whole files, or the parts of files between separator lines (--doc-separator; "%"
// for fortune files). With GPT-2's tokenizer each document starts with <|endoftext|>, as llm.c's
// preparation scripts write them. The validation split is the first val_fraction of the input's
// bytes (its tokens up to the token that crosses that byte), the rest is the training split, so
// the split does not depend on the number of threads or shards. Shards hold at most shard_tokens
// tokens each: NAME_val_000000.bin, NAME_train_000000.bin, ... (llm.c's header: magic 20240520,
// version 1, then uint16 tokens), and NAME_info.json says what made them.
//
// Text is encoded in parallel: documents are cut into pieces of about 1 MiB at points where GPT-2's
// pre-tokenizer starts a new piece anyway, so the tokens are the same as one serial pass over each
// document: after a newline that follows a printable ASCII character and precedes another. (Not
// after any newline: a white-space run that ends a piece of text is one token, "  \n" say, where
// inside the text it would be "  " and "\n".) Input files are read one at a
// time, whole. Nothing is overwritten: existing shards of the same name are an error, and so is a
// name whose shards another data set's patterns in the folder would match. Shards are written under
// temporary names and renamed once the whole input is encoded, then NAME_info.json is written: a
// run stopped before leaves no shard under a shard's name.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace amp {

struct PrepareOptions {
  std::vector<std::string> inputs;  // text files or glob patterns, in order
  std::string out_dir;
  std::string name = "data";        // shard file prefix
  std::string tokenizer = "gpt2";   // gpt2 or bytes
  std::string doc_separator;        // a line that separates documents ("": one per file)
  double val_fraction = 0.05;       // of the input bytes, at the head
  uint64_t shard_tokens = 100000000;
  int threads = 0;                  // 0: every CPU
  size_t chunk_bytes = size_t(1) << 20;  // pieces encoded in parallel (tests make them small)
};

struct PrepareResult {
  uint64_t bytes = 0, documents = 0, train_tokens = 0, val_tokens = 0;
  std::vector<std::string> train_files, val_files;
  double seconds = 0;       // reading, encoding and writing
  double load_seconds = 0;  // loading the tokenizer
};

// progress: where the progress bar goes (nullptr: none). Data errors name the input file; output
// errors the shard.
PrepareResult prepare_shards(const PrepareOptions& opt, std::FILE* progress);

// A run's token shards (data.train_tokens, data.eval_tokens) against the NAME_info.json that
// prepare wrote beside them; shards without one (other programs') pass. Data errors, naming the
// shard and the info file: a shard the info does not list; a validation shard named for training,
// or a training shard for evaluation; a tokenizer other than the run's (`tokenizer`, "" for none)
// or than another shard's.
void check_prepared_shards(const std::vector<std::string>& train, const std::vector<std::string>& eval,
                           const std::string& tokenizer);

// Where a document may be cut without changing its GPT-2 (or byte) tokens: positions p with
// text[p-1] == '\n' and text[p-2], text[p] printable ASCII other than space. The first at or
// after `from` (text.size() when none).
size_t next_safe_cut(const std::string& text, size_t from);

}  // namespace amp
