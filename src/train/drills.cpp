#include "train/drills.h"

#include <csignal>
#include <limits>

#include "core/convert.h"
#include "core/error.h"
#include "train/signals.h"

namespace amp {

Drills::Drills(const Config& cfg, int rank) : cfg_(cfg), rank_(rank) {}

void Drills::fail_setup(const char* phase) const {
  for (const FaultSpec& f : cfg_.faults.fail_setup)
    if (f.rank == rank_ && f.value == phase)
      throw Error(ErrorKind::Internal,
                  strcat("faults.fail_setup: set-up phase \"", phase, "\" failed on rank ", rank_, " (drill)"));
}

void Drills::check_ranks(int world) const {
  const std::pair<const char*, const std::vector<FaultSpec>*> lists[] = {
      {"faults.inject_nonfinite", &cfg_.faults.inject_nonfinite},
      {"faults.raise_signal", &cfg_.faults.raise_signal},
      {"faults.corrupt_params", &cfg_.faults.corrupt_params},
      {"faults.fail_setup", &cfg_.faults.fail_setup}};
  for (const auto& [key, list] : lists)
    for (const FaultSpec& f : *list)
      if (f.rank >= world)
        throw Error(ErrorKind::Config, strcat("config error: ", cfg_.origin.count(key) ? cfg_.origin.at(key) + ": " : "",
                                              key, ": rank ", f.rank, " does not exist in a run of ", world,
                                              " rank(s) (ranks 0-", world - 1, ")"));
}

void Drills::bind(const ParamLayout& layout, int world) {
  layout_ = &layout;
  for (const FaultSpec& f : cfg_.faults.inject_nonfinite) {
    if (f.rank >= world)
      throw Error(ErrorKind::Config, strcat("config error: faults.inject_nonfinite: rank ", f.rank,
                                            " does not exist in a run of ", world, " rank(s)"));
    if (!f.tensor.empty() && layout.index_of(f.tensor) < 0)
      throw Error(ErrorKind::Config, strcat("config error: faults.inject_nonfinite: no parameter tensor \"", f.tensor,
                                            "\" (the model has ", layout.names(), ")"));
    if (f.rank == rank_) my_faults_.push_back(f);
  }
}

void Drills::plant_gradient(int64_t step, int tensor, DeviceMemory& mem, void* grads, DType dtype) const {
  for (const FaultSpec& f : my_faults_) {
    if (f.step != step) continue;
    const int target = f.tensor.empty() ? 0 : layout_->index_of(f.tensor);
    if (target != tensor) continue;
    const float v = f.value == "nan" ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
    char bits[4];
    convert(&v, DType::F32, bits, dtype, 1);
    mem.upload(static_cast<char*>(grads) + layout_->tensors[size_t(tensor)].span.offset * dtype_size(dtype), bits,
               dtype_size(dtype));
  }
}

void Drills::raise_signal(int64_t step) const {
  for (const FaultSpec& f : cfg_.faults.raise_signal)
    if (f.step == step && f.rank == rank_) raise_stop_signal(f.value == "USR1" ? SIGUSR1 : SIGTERM);
}

void Drills::corrupt_params(int64_t step, DeviceMemory& mem, void* weights, DType dtype) const {
  for (const FaultSpec& f : cfg_.faults.corrupt_params) {
    if (f.step != step || f.rank != rank_) continue;
    uint32_t raw = 0;
    float w0;
    mem.download(&raw, weights, dtype_size(dtype));
    convert(&raw, dtype, &w0, DType::F32, 1);
    w0 = w0 * 1.01f + 1e-3f;  // a change every 16-bit format can hold
    convert(&w0, DType::F32, &raw, dtype, 1);
    mem.upload(weights, &raw, dtype_size(dtype));
  }
}

}  // namespace amp
