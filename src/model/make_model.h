// Builds the model model.type names, sized from the data (inputs, outputs) and checked against the
// memory this rank may use: a model too large for the machine is a config error naming the key,
// not an allocation failure (or an overflowed size) somewhere inside.
#pragma once

#include <memory>
#include <vector>

#include "backend/compute_ops.h"
#include "backend/memory.h"
#include "config/config.h"
#include "data/dataset.h"
#include "model/gpt.h"
#include "model/model.h"
#include "optim/state_bytes.h"

namespace amp {

// max_rows: the most samples one forward pass holds (training or evaluation batch); world: the
// data-parallel ranks (distributed.zero shards the state over them); bytes_available: what this
// rank may allocate (0: unknown, not checked). The check counts the model's activations and the
// training state of optim/state_bytes.h.
// A GPT's options from the config and its data's vocabulary.
GptOptions gpt_options(const Config& cfg, size_t vocab);

// An MLP's layer widths: its data's inputs, model.hidden, its data's outputs.
std::vector<size_t> mlp_widths(const Config& cfg, size_t inputs, size_t outputs);

// The training state of a model of layout L on each of world ranks (optim/state_bytes.h), as the
// config shards and buckets it: what make_model checks and --dry-run prints.
StateBytes model_state_bytes(const Config& cfg, const ParamLayout& L, DType compute, int world);

std::unique_ptr<Model> make_model(const Config& cfg, const Dataset& train, DeviceMemory& mem, ComputeOps& ops,
                                  DType compute, size_t max_rows, int world, size_t bytes_available);

}  // namespace amp
