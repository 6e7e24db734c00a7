// `amp_ddp prepare FILES... -o DIR`: text -> llm.c token shards (data/prepare.h), then a summary
// with the config lines that train on them.
#pragma once

#include "data/prepare.h"

namespace amp {

// Prints the summary to stdout, the progress bar to stderr (quiet: none). Errors are amp::Error.
void run_prepare(const PrepareOptions& o, bool quiet);

}  // namespace amp
