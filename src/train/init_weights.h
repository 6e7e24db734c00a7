// model.init_from: a run's initial FP32 masters from weights another run or program wrote (a
// safetensors file in Hugging Face's GPT-2 layout, an llm.c model file: model/weights_io.h) or from
// an amp_ddp checkpoint (its masters, for any model), checked against the model this config builds.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"
#include "model/param_layout.h"

namespace amp {

// The masters for layout L (vocab: the GPT's vocabulary, unused for an MLP). Errors name
// model.init_from, the file and what does not match (a Checkpoint error).
std::vector<float> read_initial_weights(const Config& cfg, const ParamLayout& L, size_t vocab);

}  // namespace amp
