// `mpirun -np N amp_ddp eval CONFIG --set model.init_from=WEIGHTS`: the evaluation loss (and
// perplexity) of a checkpoint's or another program's weights on the config's evaluation set, on
// N ranks, without training and without writing anything. The weights are read as model.init_from
// reads them (an amp_ddp checkpoint, a safetensors file in Hugging Face's GPT-2 layout, an llm.c
// model file), cast to precision.compute, and evaluated as a training run evaluates: windows of
// model.seq_len + 1 tokens, data.eval_batch_size per batch, run.eval_iters batches per rank at most.
#pragma once

#include "comm/communicator.h"
#include "config/config.h"

namespace amp {

// Prints one line on rank 0; returns the exit code. Errors are amp::Error, agreed across ranks.
int run_eval(const Config& cfg, Communicator& world);

}  // namespace amp
