// The device seam of amp_gpu_tests: the CUDA backend, its two GEMM paths, NCCL over its stream.
#include "comm/device_stream.h"
#include "cuda/cuda_backend.h"
#include "device_env.h"
#if AMP_TEST_WITH_NCCL
#include "comm/nccl/nccl_communicator.h"
#endif

namespace gpu_test {

std::unique_ptr<amp::Backend> make_device(int local_rank) {
  REQUIRE(amp::cuda_available());
  return amp::make_backend("cuda", local_rank, 1);
}

const char* device_name() { return "cuda"; }
bool device_is_gpu() { return true; }

std::vector<std::string> gemm_paths() { return {"cuBLASLt where it has an algorithm", "cuBLAS forced"}; }

namespace {
amp::cuda::CudaBackend& cuda_of(amp::Backend& dev) {
  auto* c = dynamic_cast<amp::cuda::CudaBackend*>(&dev);
  REQUIRE(c != nullptr);
  return *c;
}
}  // namespace

void select_gemm_path(amp::Backend& dev, size_t i) { cuda_of(dev).cuda_ops().set_force_cublas(i == 1); }

std::string gemm_path(amp::Backend& dev, const amp::GemmArgs& g) { return cuda_of(dev).cuda_ops().gemm_path(g); }

std::vector<AttentionPath> attention_paths() {
  return {{"tensor cores where they take the shape", false}, {"the specification forced", true}};
}

void select_attention_path(amp::Backend& dev, size_t i) { cuda_of(dev).cuda_ops().set_exact_attention(i == 1); }

DeviceComm::DeviceComm(amp::Backend& dev) {
#if AMP_TEST_WITH_NCCL
  auto* stream = dynamic_cast<amp::DeviceStream*>(&dev);
  REQUIRE(stream != nullptr);
  owned_ = std::make_unique<amp::NcclCommunicator>(world(), *stream);
  comm_ = owned_.get();
#else
  (void)dev;
  FAIL("this amp_gpu_tests was built without NCCL: no device communicator");
#endif
}

DeviceComm::~DeviceComm() = default;

}  // namespace gpu_test
