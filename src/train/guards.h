// The run's guards against silent failure, every verdict agreed across ranks: ranks that loaded
// different configs or data, ranks whose weights drifted apart, non-finite master weights, and a
// training loss that is non-finite or exploding (run.max_loss_ratio). Each throws an agreed Error
// of kind Comm, Data or Divergence.
#pragma once

#include <cstdint>
#include <string>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "config/config.h"
#include "model/param_layout.h"

namespace amp {

class Guards {
 public:
  Guards(const Config& cfg, Communicator& world, Backend& be);
  void bind(const ParamLayout& layout);  // tensor names for messages; scratch flag

  // Collective: the ranks whose value differs from rank 0's ("1, 3"; "" when all agree).
  std::string ranks_differing_from_0(uint64_t mine, uint64_t* rank0);
  // Same config (and program) and same data on every rank.
  void check_ranks_agree(uint64_t data_digest, const std::string& data_source);
  // Same master weights on every rank (by hash).
  void check_params_in_sync(int64_t step, uint64_t params_hash);
  // precision.compute fp8: every rank's FP8 scales and amax histories are rank 0's (the amaxes
  // travel in the step's all-reduce; a rank casting with other scales computes another forward).
  void check_fp8_in_sync(int64_t step, uint64_t fp8_hash);
  // Every FP32 master weight finite (checked on the backend; only the verdict is read back).
  // master: the FP32 masters this rank holds, spans: the tensors' ranges in them, count: how many.
  void check_finite_weights(int64_t step, const float* master, const std::vector<TensorSpan>& spans, size_t count);
  // The interval's mean training loss: finite, and within run.max_loss_ratio of step 1's.
  // uniform_loss: ln(classes) of a cross-entropy model (Model::uniform_loss), 0 for regression.
  void check_loss(int64_t step, double loss, double first_loss, double uniform_loss) const;

 private:
  const Config& cfg_;
  Communicator& world_;
  Backend& be_;
  const ParamLayout* layout_ = nullptr;
  Buffer flag_;
};

}  // namespace amp
