#include "train/prepare_command.h"

#include <cstdio>

#include "core/error.h"
#include "core/format.h"
#include "train/run_dir.h"

namespace amp {

void run_prepare(const PrepareOptions& o, bool quiet) {
  // Two runs into one folder would write the same temporaries and mix their shards: the folder's
  // lock (a training run's too) refuses the second.
  const RunDirLock lock(o.out_dir, "prepare -o");
  const PrepareResult r = prepare_shards(o, quiet ? nullptr : stderr);
  const std::string glob = o.out_dir + "/" + o.name;
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f", r.seconds);
  std::printf("%s", strcat("prepared ", r.documents, " document(s), ", format_bytes(double(r.bytes)), " of text in ",
                           secs, " s (", format_bytes(r.seconds > 0 ? double(r.bytes) / r.seconds : 0),
                           "/s; the tokenizer loaded in ", int(r.load_seconds * 1000 + 0.5), " ms): ", r.val_tokens, " validation tokens in ", r.val_files.size(), " shard(s), ", r.train_tokens,
                           " training tokens in ", r.train_files.size(), " shard(s), in ", o.out_dir,
                           "\nto train on them:\n  data: {format: tokens, tokenizer: ", o.tokenizer, ", train_tokens: [", glob,
                           "_train_*.bin]", r.val_files.empty() ? "" : strcat(", eval_tokens: [", glob, "_val_*.bin]"), "}\n")
                        .c_str());
}

}  // namespace amp
