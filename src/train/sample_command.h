// `amp_ddp sample CHECKPOINT`: text from a trained language model without its training data. The
// checkpoint carries everything needed: its config (the model's shape, the data's tokenizer, the
// sample.* defaults), its layout and its FP32 masters, which are cast to the run's compute
// precision as the optimizer casts them into the working copy, so the sample of a run's final
// checkpoint with the run's sample.* settings is the run's final sample.
#pragma once

#include <optional>
#include <string>

namespace amp {

struct SampleRequest {
  std::string checkpoint;
  // Each unset option takes the checkpoint's sample.* value.
  std::optional<std::string> prompt;
  std::optional<int64_t> tokens, top_k, seed;
  std::optional<double> temperature, top_p;
  int64_t samples = 1;  // sample i (from 0) draws with seed + i
  std::string device = "cpu";
  int threads = 0;  // 0: every CPU of this process
};

// The line between two samples on stdout.
inline constexpr const char* kSampleSeparator = "---------------\n";

// Prints the samples' text to stdout, each followed by a newline, kSampleSeparator between two.
// Errors are amp::Error (checkpoint, config, device).
void run_sample(const SampleRequest& r);

}  // namespace amp
