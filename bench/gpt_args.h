// The GPT benchmarks' shape options (bench_gpt_step, bench_sampling): --layers, --embd, --heads,
// --seq and --vocab set the model's GptOptions.
#pragma once

#include <cstdlib>
#include <string>

#include "model/gpt.h"

namespace amp::bench {

// True when `option` is one of the shape options (its value parsed into o).
inline bool gpt_shape_option(const std::string& option, const char* value, GptOptions& o) {
  const size_t v = std::strtoul(value, nullptr, 10);
  if (option == "--layers") o.n_layer = v;
  else if (option == "--embd") o.n_embd = v;
  else if (option == "--heads") o.n_head = v;
  else if (option == "--seq") o.seq_len = v;
  else if (option == "--vocab") o.vocab = v;
  else return false;
  return true;
}

}  // namespace amp::bench
