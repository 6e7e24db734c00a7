// The FP8 scaling state of a run (precision.compute fp8), owned by MixedPrecision: per FP8 tensor
// (a linear layer's input, weight or output gradient, named by the model) its scale, its format's
// maximum and its amax history, in one buffer of backend memory, plus counters of the values its
// casts flushed to zero or saturated. The step's casts read the scales and MAX their amaxes into
// words of the overflow-flag buffer; the step's one all-reduce carries them to every rank with the
// flags, and update() (enqueued after it) sets the next step's scales: the step never waits for a
// scale, and every rank holds the same ones (amp/fp8_scaling.h has the rule).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "amp/fp8_scaling.h"
#include "backend/amp_kernels.h"
#include "backend/memory.h"

namespace amp {

class Fp8State {
 public:
  Fp8State(DeviceMemory& mem, AmpKernels& kernels, const Fp8Params& params, std::vector<Fp8Tensor> tensors);

  int count() const { return int(tensors_.size()); }
  const std::vector<Fp8Tensor>& tensors() const { return tensors_; }
  const Fp8Params& params() const { return params_; }
  Fp8Binding binding(int32_t* amax_words) const;
  // After the step's all-reduce: the reduced amax words join the histories and the scales move,
  // unless flags[kAny] (the step is skipped). Enqueued on the backend (capturable).
  void update(const int32_t* amax_words, const int32_t* flags);

  // ---- host side: checkpoints and reports --------------------------------------------------------
  struct Host {
    std::vector<float> scales, history;  // n; n x params().history (tensor-major rings)
    Fp8Meta meta;
  };
  Host read() const;  // downloads
  void load(const Host& h);  // a resumed state (sizes checked by the caller)
  std::vector<Fp8Counts> read_counts() const;
  // The newest recorded amax of tensor t in h (0 before any step was recorded: callers leave it out).
  float newest_amax(const Host& h, int t) const;
  // The FP8 operands whose amax was not finite at the last skipped step (any rank's: the words are
  // the reduced ones), for the skip report: the first in the step's order (the forward's E4M3
  // operands in the order the model declared them, which is forward order, then the output
  // gradients in reverse, as backward casts them), and how many more; "" when none was.
  std::string nonfinite_operands() const;

 private:
  DeviceMemory& mem_;
  AmpKernels& k_;
  Fp8Params params_;
  std::vector<Fp8Tensor> tensors_;
  Buffer state_, counts_;  // scales | inverses | fmax | history | meta;  3 int64 per tensor
  Buffer skipped_amax_;    // the amax words of the last skipped step
  float* scales_ = nullptr;
  float* inv_scales_ = nullptr;
  float* fmax_ = nullptr;
  float* history_ = nullptr;
  Fp8Meta* meta_ = nullptr;
};

}  // namespace amp
