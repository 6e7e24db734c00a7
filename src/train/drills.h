// Fault drills (config section faults): planted non-finite gradients, stop signals, perturbed
// weights and failed set-up phases, so that every failure path of the trainer can be exercised on
// purpose, on chosen ranks and steps. Nothing here runs unless the config asks for it.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/memory.h"
#include "config/config.h"
#include "amp/fp8_scaling.h"
#include "model/param_layout.h"

namespace amp {

class Drills {
 public:
  Drills(const Config& cfg, int rank);
  // faults.fail_setup: throws on this rank when the phase is listed for it.
  void fail_setup(const char* phase) const;
  // Checks faults.inject_nonfinite against the model (tensor names) and the world (ranks); throws
  // a Config error naming what does not exist.
  // Every drill must aim at a rank of this run: a drill for rank 3 of a 2-rank run never fires
  // (the run would pass without drilling anything). Throws Error(Config) naming the drill.
  void check_ranks(int world) const;
  // A drill's tensor is a parameter tensor (its gradient) or, with FP8 compute, an FP8 output
  // gradient (NAME.grad_output of fp8: the model's FP8 tensors); anything else is a Config error.
  void bind(const ParamLayout& layout, int world, const std::vector<Fp8Tensor>& fp8 = {});
  bool plants_gradients() const { return !my_faults_.empty(); }
  bool plants_fp8_gradients() const { return !my_fp8_faults_.empty(); }
  // faults.inject_nonfinite: writes inf/nan into tensor's first gradient element at that step
  // (called as backward completes the tensor, before its bucket is checked and reduced).
  void plant_gradient(int64_t step, int tensor, DeviceMemory& mem, void* grads, DType dtype) const;
  // ... into the first element of an FP8 output gradient (fp8_tensor: its index in the model's FP8
  // tensors) before the step casts it to E5M2: data holds it, in dtype.
  void plant_fp8_gradient(int64_t step, int fp8_tensor, DeviceMemory& mem, void* data, DType dtype) const;
  // faults.raise_signal: delivers the stop signal to this process after that step.
  void raise_signal(int64_t step) const;
  // faults.await_signal: after that step, waits until a stop signal arrives from outside (SLURM's
  // scancel or requeue, mpirun's forwarding), so that a drill interrupts the run at a known step
  // whatever the machine's speed. No signal within the drill's timeout_s: an error, not a hang.
  void await_signal(int64_t step) const;
  // faults.corrupt_params: this rank's copy of the first weight drifts after that step (desync
  // drill). weights: what every rank holds a replica of (TrainStep::replica_data: the FP32
  // masters, or the working copy when the optimizer state is sharded), of type dtype.
  void corrupt_params(int64_t step, DeviceMemory& mem, void* weights, DType dtype) const;
  // Whether corrupt_params has a drill for this rank at this step (the caller asks for the
  // weights only then: reading them settles the overlapped all-gather).
  bool corrupts_at(int64_t step) const;

 private:
  const Config& cfg_;
  int rank_;
  const ParamLayout* layout_ = nullptr;
  std::vector<FaultSpec> my_faults_;
  std::vector<std::pair<FaultSpec, int>> my_fp8_faults_;  // with the FP8 tensor's index
};

}  // namespace amp
