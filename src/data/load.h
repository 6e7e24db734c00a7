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

// What the sets are for. Evaluation alone (amp_ddp eval) needs the training set only for its shape
// (the vocabulary, the context) and, for features, its normalization: token shards with
// data.eval_tokens and a known vocabulary (model.vocab_size or data.tokenizer) do not read the
// training shards at all, and no language-model training set needs windows of its own.
enum class DataUse { Training, EvaluationOnly };

DataSets load_datasets(const Config& cfg, DataUse use = DataUse::Training);

// Digest of a data set's contents (features, labels or targets, tokens, shape), chained from `seed`:
// ranks compare it to catch nodes whose copies of the data files differ.
uint64_t dataset_digest(const Dataset& d, uint64_t seed);

}  // namespace amp
