// Builds the training and evaluation sets a config asks for: IDX, CSV or synthetic, normalized with
// statistics of the training set; or language-model windows of model.seq_len tokens over text files
// (bytes) or llm.c token shards (data.format text, tokens).
#pragma once

#include "config/config.h"
#include "data/dataset.h"

namespace amp {

struct DataSets {
  Dataset train;
  Dataset eval;  // n == 0: no evaluation
};

DataSets load_datasets(const Config& cfg);

// Digest of a data set's contents (features, labels or targets, tokens, shape), chained from `seed`:
// ranks compare it to catch nodes whose copies of the data files differ.
uint64_t dataset_digest(const Dataset& d, uint64_t seed);

}  // namespace amp
