#include "cudart/host_wait.h"

#include <chrono>
#include <thread>

#include "cudart/cuda_check.h"

namespace amp::cuda {

namespace {

constexpr auto kCheckEvery = std::chrono::milliseconds(5);
constexpr auto kSpinFor = std::chrono::microseconds(200);  // then sleep between queries
constexpr auto kSleep = std::chrono::microseconds(50);

// Polls query() until it stops answering cudaErrorNotReady; check() runs at the start and then
// every kCheckEvery.
template <typename Query>
cudaError_t poll(Query query, const WaitCheck& check) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto next_check = start;
  for (;;) {
    const cudaError_t e = query();
    if (e != cudaErrorNotReady) return e;
    cudaGetLastError();  // "not ready" is no error: leave nothing for a later launch check to find
    const auto now = clock::now();
    if (now >= next_check) {
      check();
      next_check = now + kCheckEvery;
    }
    if (now - start < kSpinFor) std::this_thread::yield();
    else std::this_thread::sleep_for(kSleep);
  }
}

}  // namespace

void wait_stream(cudaStream_t stream, const WaitCheck& check) {
  if (!check) {
    AMP_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  AMP_CUDA_CHECK(poll([&] { return cudaStreamQuery(stream); }, check));
}

void wait_event(cudaEvent_t event, const WaitCheck& check) {
  if (!check) {
    AMP_CUDA_CHECK(cudaEventSynchronize(event));
    return;
  }
  AMP_CUDA_CHECK(poll([&] { return cudaEventQuery(event); }, check));
}

}  // namespace amp::cuda
