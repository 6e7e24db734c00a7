// model.init_from: a run's initial FP32 masters from weights another run or program wrote (a
// safetensors file in Hugging Face's GPT-2 layout, an llm.c model file: model/weights_io.h) or from
// an amp_ddp checkpoint (its masters, for any model), checked against the model this config builds.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "amp/fp8_scaling.h"
#include "config/config.h"
#include "model/param_layout.h"
#include "model/weight_pieces.h"

namespace amp {

// With FP8 compute, the scales the weights' run ended with (for the eval command): from an
// amp_ddp checkpoint of a run with the model's FP8 tensors (checkpoint_fp8_scales), else none.
struct InitialFp8 {
  std::vector<Fp8Tensor> tensors;  // in: the model's FP8 tensors
  std::vector<float> scales;       // out: one per tensor; empty: none
  std::string why;                 // out: why there are none ("WEIGHTS has ...")
};

// The masters for layout L (vocab: the GPT's vocabulary, unused for an MLP), read a piece at a time
// (the reader holds a piece, never the model). What the file says about itself is checked here,
// its values as they are read. Errors name model.init_from, the file and what does not match (a
// Checkpoint error). fp8 (optional): the FP8 scales too. L must outlive the reader.
std::unique_ptr<WeightPieces> open_initial_weights(const Config& cfg, const ParamLayout& L, size_t vocab,
                                                   InitialFp8* fp8 = nullptr);

}  // namespace amp
