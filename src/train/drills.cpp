#include "train/drills.h"

#include <chrono>
#include <csignal>
#include <limits>
#include <thread>

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
      {"faults.await_signal", &cfg_.faults.await_signal},
      {"faults.fail_setup", &cfg_.faults.fail_setup}};
  for (const auto& [key, list] : lists)
    for (const FaultSpec& f : *list)
      if (f.rank >= world)
        throw Error(ErrorKind::Config, strcat("config error: ", cfg_.origin.count(key) ? cfg_.origin.at(key) + ": " : "",
                                              key, ": rank ", f.rank, " does not exist in a run of ", world,
                                              " rank(s) (ranks 0-", world - 1, ")"));
}

void Drills::bind(const ParamLayout& layout, int world, const std::vector<Fp8Tensor>& fp8) {
  layout_ = &layout;
  const auto fp8_index = [&](const std::string& name) {
    for (size_t t = 0; t < fp8.size(); ++t)
      if (fp8[t].name == name) return int(t);
    return -1;
  };
  for (const FaultSpec& f : cfg_.faults.inject_nonfinite) {
    if (f.rank >= world)
      throw Error(ErrorKind::Config, strcat("config error: faults.inject_nonfinite: rank ", f.rank,
                                            " does not exist in a run of ", world, " rank(s)"));
    if (f.tensor.empty() || layout.index_of(f.tensor) >= 0) {
      if (f.rank == rank_) my_faults_.push_back(f);
      continue;
    }
    const int t = fp8_index(f.tensor);
    if (t >= 0 && fp8[size_t(t)].format == Fp8::E5M2) {
      if (f.rank == rank_) my_fp8_faults_.emplace_back(f, t);
      continue;
    }
    throw Error(ErrorKind::Config,
                strcat("config error: faults.inject_nonfinite: ",
                       t >= 0 ? strcat("\"", f.tensor, "\" is an FP8 operand of the forward pass (e4m3); drills "
                                                      "plant into gradients: a parameter tensor or an FP8 output "
                                                      "gradient (NAME.grad_output)")
                              : strcat("no parameter tensor \"", f.tensor, "\" (the model has ", layout.names(),
                                       fp8.empty() ? "" : ", and FP8 output gradients NAME.grad_output", ")",
                                       fp8.empty() && f.tensor.find(".grad_output") != std::string::npos
                                           ? "; FP8 output gradients exist with precision.compute fp8 only"
                                           : "")));
  }
}

namespace {

// The planted value (faults value inf|nan) into the first element at data, in dtype.
void plant(const FaultSpec& f, DeviceMemory& mem, void* data, DType dtype) {
  const float v = f.value == "nan" ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  char bits[4];
  convert(&v, DType::F32, bits, dtype, 1);
  mem.upload(data, bits, dtype_size(dtype));
}

}  // namespace

void Drills::plant_gradient(int64_t step, int tensor, DeviceMemory& mem, void* grads, DType dtype) const {
  for (const FaultSpec& f : my_faults_) {
    if (f.step != step) continue;
    const int target = f.tensor.empty() ? 0 : layout_->index_of(f.tensor);
    if (target != tensor) continue;
    plant(f, mem, static_cast<char*>(grads) + layout_->tensors[size_t(tensor)].span.offset * dtype_size(dtype), dtype);
  }
}

void Drills::plant_fp8_gradient(int64_t step, int fp8_tensor, DeviceMemory& mem, void* data, DType dtype) const {
  for (const auto& [f, t] : my_fp8_faults_)
    if (f.step == step && t == fp8_tensor) plant(f, mem, data, dtype);
}

void Drills::raise_signal(int64_t step) const {
  for (const FaultSpec& f : cfg_.faults.raise_signal)
    if (f.step == step && f.rank == rank_) raise_stop_signal(f.value == "USR1" ? SIGUSR1 : SIGTERM);
}

void Drills::await_signal(int64_t step) const {
  for (const FaultSpec& f : cfg_.faults.await_signal) {
    if (f.step != step || f.rank != rank_) continue;
    const auto start = std::chrono::steady_clock::now();
    while (stop_signal() == 0) {
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > double(f.timeout_s))
        throw Error(ErrorKind::Internal, strcat("faults.await_signal: no stop signal within ", f.timeout_s,
                                                " s after step ", step, " on rank ", rank_, " (drill)"));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

bool Drills::corrupts_at(int64_t step) const {
  for (const FaultSpec& f : cfg_.faults.corrupt_params)
    if (f.step == step && f.rank == rank_) return true;
  return false;
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
