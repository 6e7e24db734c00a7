// The device seam of amp_device_logic_tests: a second CPU backend stands in for the GPU, the MPI
// world for NCCL. Every device test case runs its set-up, sizes, snapshots and expectations
// against it in the ordinary suite (the comparisons become CPU against CPU).
#include "device_env.h"

namespace gpu_test {

std::unique_ptr<amp::Backend> make_device(int /*local_rank*/) { return amp::make_backend("cpu", 0, 2); }

const char* device_name() { return "cpu"; }
bool device_is_gpu() { return false; }

std::vector<std::string> gemm_paths() { return {"oneDNN"}; }

void select_gemm_path(amp::Backend& /*dev*/, size_t i) { REQUIRE(i == 0); }

std::vector<AttentionPath> attention_paths() {
  return {{"BF16 with P and dS rounded: on the matmul on AMX CPUs, the kernels' BF16 products on AVX-512-BF16 ones "
           "(else the specification)",
           false},
          {"the specification", true}};
}

void select_attention_path(amp::Backend& dev, size_t i) {
  auto* c = dynamic_cast<amp::CpuBackend*>(&dev);
  REQUIRE(c != nullptr);
  c->cpu_ops().set_exact_attention(i == 1);
}

std::string gemm_path(amp::Backend& dev, const amp::GemmArgs& g) {
  auto* c = dynamic_cast<amp::CpuBackend*>(&dev);
  REQUIRE(c != nullptr);
  return c->cpu_ops().gemm_implementation(g);
}

DeviceComm::DeviceComm(amp::Backend& /*dev*/) : comm_(&world()) {}

DeviceComm::~DeviceComm() = default;

}  // namespace gpu_test
