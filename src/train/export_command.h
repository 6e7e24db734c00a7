// `amp_ddp export CHECKPOINT --format safetensors|llmc -o FILE`: a GPT checkpoint's FP32 masters in
// the layouts of Hugging Face's GPT-2 (safetensors) or llm.c's model file (model/weights_io.h), so
// they load in PyTorch/transformers or llm.c, and back into amp_ddp with model.init_from.
#pragma once

#include <string>

#include "model/weights_io.h"

namespace amp {

// Writes the file (which must not exist) and prints one line saying what it wrote.
void run_export(const std::string& checkpoint, WeightFormat format, const std::string& out);

}  // namespace amp
