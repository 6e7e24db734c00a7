// Evaluation on this rank's contiguous shard of the evaluation set, in batches of
// data.eval_batch_size, from the working parameters; loss sums and hits are summed over the ranks.
#pragma once

#include <cstddef>

#include "backend/memory.h"
#include "comm/communicator.h"
#include "data/dataset.h"
#include "model/model.h"

namespace amp {

struct EvalResult {
  double loss = 0, accuracy = 0;
  size_t samples = 0;
};

// Collective over `world`. max_batches: at most this many batches per rank, the first of its shard
// (0: the whole shard; run.eval_iters).
EvalResult evaluate(Model& model, DeviceMemory& mem, const void* params, const Dataset& eval, size_t eval_batch,
                    Communicator& world, size_t max_batches = 0);

}  // namespace amp
