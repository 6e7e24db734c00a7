#include "cuda/cuda_backend.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace amp::cuda {

namespace {

constexpr size_t kStagingBytes = size_t(64) << 20;   // pinned upload ring
constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // cuBLASLt workspace (32 MiB suits Hopper)

// Frees device memory handed out by alloc(): waits for the stream first (work enqueued on it may
// still read the memory; cudaFree's own implicit synchronization is not documented as a promise).
void release_device(void* p, cudaStream_t s) noexcept {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &st) == cudaSuccess && st == cudaStreamCaptureStatusNone)
    AMP_CUDA_WARN(cudaStreamSynchronize(s));
  AMP_CUDA_WARN(cudaFree(p));
}

// Graph ids, unique in the process.
std::atomic<uint64_t> g_next_graph_id{1};

}  // namespace

CudaBackend::CudaBackend(int device) : device_(device) {
  AMP_CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop{};
  AMP_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  name_ = strcat("cuda:", device, " (", prop.name, ")");
  // One wave of 256-thread blocks at full occupancy: the grid-stride kernels loop beyond it.
  max_blocks_ = unsigned(std::max(1, prop.multiProcessorCount)) * 8u;
  stream_ = std::make_shared<Stream>(0);
  ring_ = std::make_unique<StagingRing>(kStagingBytes, &wait_check_);
  ops_ = std::make_unique<CudaOps>(stream_->get(), &wait_check_, kWorkspaceBytes);
  vmm_page_ = vmm_granularity(device);
}

CudaBackend::~CudaBackend() {
  release_capture();  // also closes a capture an exception left open
  // Pending copies read the staging ring and kernels the workspace: finish them before those go.
  AMP_CUDA_WARN(cudaStreamSynchronize(stream_->get()));
}

void CudaBackend::release_capture() noexcept {
  if (capturing_) {  // an exception left a capture open: close it and drop what it recorded
    cudaGraph_t g = nullptr;
    if (cudaStreamEndCapture(stream_->get(), &g) == cudaSuccess && g) AMP_CUDA_WARN(cudaGraphDestroy(g));
    cudaGetLastError();
    capturing_ = false;
  }
  // No wait: an executable graph destroyed while a launch of it is in flight is freed when that
  // launch completes (the CUDA driver's contract), which is what NCCL then waits for.
  graph_.reset();
  graph_id_ = 0;
  launches_ = 0;
}

void CudaBackend::not_capturing(const char* what) const {
  if (capturing_)
    throw Error(ErrorKind::Internal, strcat("cuda backend: ", what, " is not allowed while a CUDA graph is being "
                                            "captured (it would synchronize with the host or replay stale data)"));
}

// ---- memory ---------------------------------------------------------------------------------

Buffer CudaBackend::alloc(size_t bytes) {
  not_capturing("alloc");
  const size_t rounded = std::max<size_t>(256, (bytes + 255) / 256 * 256);
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, rounded);
  if (e != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw Error(ErrorKind::Device, strcat("out of device memory on ", name_, ": allocating ", bytes, " bytes (",
                                          free_b >> 20, " MiB free of ", total_b >> 20, " MiB): ",
                                          cuda_error_string(e)));
  }
  std::shared_ptr<Stream> keep = stream_;
  Buffer buf(p, bytes, [keep](void* q) { release_device(q, keep->get()); });
  AMP_CUDA_CHECK(cudaMemsetAsync(p, 0, rounded, stream_->get()));
  return buf;
}

Buffer CudaBackend::alloc_releasable(size_t bytes) {
  if (vmm_page_ == 0) return alloc(bytes);
  not_capturing("alloc_releasable");
  auto a = std::make_shared<VmmAllocation>(device_, bytes, stream_->get());
  releasable_.erase(std::remove_if(releasable_.begin(), releasable_.end(),
                                   [](const std::weak_ptr<VmmAllocation>& w) { return w.expired(); }),
                    releasable_.end());
  releasable_.push_back(a);
  std::shared_ptr<Stream> keep = stream_;  // the allocation's destructor waits for the stream
  return Buffer(a->data(), bytes, [a, keep](void*) mutable { a.reset(); });
}

std::shared_ptr<VmmAllocation> CudaBackend::releasable_at(const void* p, const char* what) const {
  for (const std::weak_ptr<VmmAllocation>& w : releasable_)
    if (std::shared_ptr<VmmAllocation> a = w.lock(); a && a->contains(p)) return a;
  throw Error(ErrorKind::Internal, strcat("cuda backend: ", what, " of memory not from alloc_releasable()"));
}

void CudaBackend::release(void* p, size_t bytes) {
  if (vmm_page_ == 0 || bytes == 0) return;
  not_capturing("release");  // its event must be a real one, and pages cannot go inside a graph
  releasable_at(p, "release")->release(p, bytes);
}

void CudaBackend::commit(void* p, size_t bytes) {
  if (vmm_page_ == 0 || bytes == 0) return;
  not_capturing("commit");
  releasable_at(p, "commit")->commit(p, bytes);
}

size_t CudaBackend::resident_bytes(const void* p, size_t bytes) const {
  if (vmm_page_ == 0 || bytes == 0) return 0;
  return releasable_at(p, "resident_bytes")->resident(p, bytes);
}

void CudaBackend::upload(void* dst, const void* host_src, size_t bytes) {
  not_capturing("upload");
  if (bytes) ring_->upload(dst, host_src, bytes, stream_->get());
}

void CudaBackend::download(void* host_dst, const void* src, size_t bytes) {
  not_capturing("download");
  // A copy into pageable memory returns only once it has run, blocking inside the driver while the
  // stream works towards it: with a wait check (NCCL), wait for the stream first, so that the copy
  // finds it idle and a stuck collective is noticed here.
  if (wait_check_) wait_stream(stream_->get(), wait_check_);
  if (bytes) AMP_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_->get()));
  wait_stream(stream_->get(), wait_check_);
}

void CudaBackend::zero(void* dst, size_t bytes) {
  if (bytes) AMP_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream_->get()));
}

size_t CudaBackend::memory_available(int ranks_on_node) const {
  // cudaMemGetInfo answers for the calling thread's current device; the ranks of a node take the
  // devices round-robin (local rank % devices), so those on this device share its free memory.
  size_t free_bytes = 0, total = 0;
  int count = 0;
  if (cudaSetDevice(device_) != cudaSuccess || cudaMemGetInfo(&free_bytes, &total) != cudaSuccess ||
      cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;  // unknown
  }
  const int ranks = std::max(1, ranks_on_node), devices = std::max(1, count);
  const int sharing = std::max(1, (ranks - device_ + devices - 1) / devices);  // ranks r with r % devices == device_
  return free_bytes / size_t(sharing);
}

void CudaBackend::synchronize() {
  not_capturing("synchronize");
  wait_stream(stream_->get(), wait_check_);
}

// ---- elementwise ----------------------------------------------------------------------------

// ---- mixed-precision bookkeeping ------------------------------------------------------------

void CudaBackend::find_nonfinite(const void* grads, DType dtype, const std::vector<TensorSpan>& spans, size_t begin,
                                 size_t end, int32_t* flag) {
  const SpanTable& t = spans_.get(spans, begin, end, stream_->get(), *ring_);
  cuda::find_nonfinite(launch(), grads, dtype, t, flag);
}

void CudaBackend::unscale_check(const void* grads, DType dtype, const std::vector<TensorSpan>& spans,
                                const float* scale, float* out32, int32_t* flags, float* norm_sq,
                                int32_t* norm_bits) {
  const SpanTable& t = spans_.get(spans, 0, spans_extent(spans), stream_->get(), *ring_);
  cuda::unscale_check(launch(), grads, dtype, t, scale, out32, flags, norm_sq, norm_bits);
}

void CudaBackend::unscale(const void* grads, DType dtype, size_t n, const float* scale, float* out32) {
  cuda::unscale(launch(), grads, dtype, n, scale, out32);
}

std::vector<GradStats> CudaBackend::grad_stats(const void* grads, DType dtype, const std::vector<TensorSpan>& spans) {
  not_capturing("grad_stats");
  const SpanTable& t = spans_.get(spans, 0, spans_extent(spans), stream_->get(), *ring_);
  cuda::grad_stats_chunks(launch(), grads, dtype, t);
  std::vector<ChunkStats> chunk(t.size());
  download(chunk.data(), t.stats.get(), chunk.size() * sizeof(ChunkStats));
  std::vector<size_t> zeros(spans.size(), 0), subs(spans.size(), 0);
  std::vector<float> mx(spans.size(), 0.0f);
  for (size_t i = 0; i < chunk.size(); ++i) {
    const size_t k = size_t(t.host[i].tensor);
    zeros[k] += chunk[i].zeros;
    subs[k] += chunk[i].subnormals;
    const float m = chunk[i].max_abs;
    if (std::isnan(m) || std::isnan(mx[k])) mx[k] = std::numeric_limits<float>::quiet_NaN();
    else mx[k] = std::max(mx[k], m);
  }
  std::vector<GradStats> out(spans.size());
  for (size_t k = 0; k < spans.size(); ++k) {
    const double n = double(std::max<size_t>(1, spans[k].count));
    out[k] = GradStats{double(zeros[k]) / n, double(subs[k]) / n, mx[k]};
  }
  return out;
}

void CudaBackend::optimizer_step(const OptimizerStepArgs& a) {
  cuda::optimizer_step(launch(), a.params, a.lr, a.max_norm, a.master, a.g32, a.state1, a.state2, a.n, a.lp,
                       a.lp_dtype, a.verdict.flags, a.verdict.norm_sq, a.verdict.scaler);
}

void CudaBackend::check_norm(const float* norm_sq, float max_norm, int32_t* flags) {
  cuda::check_norm(launch(), norm_sq, max_norm, flags);
}

void CudaBackend::sum_norm_partials(const int32_t* flags, int world, float* norm_sq) {
  cuda::sum_norm_partials(launch(), flags, world, norm_sq);
}

void CudaBackend::update_scale(ScalerState* state, const ScalerParams& params, const int32_t* flags, int world) {
  cuda::update_scale(launch(), state, params, flags, world);
}

void CudaBackend::fp8_update(float* scales, const float* fmax, float* history, Fp8Meta* meta, const int32_t* amax_words,
                             int n, const Fp8Params& p, const int32_t* flags, float* inv_scales,
                             int32_t* skipped_amax) {
  cuda::fp8_update(launch(), scales, fmax, history, meta, amax_words, n, p, flags, inv_scales, skipped_amax);
}

// ---- capture --------------------------------------------------------------------------------

bool CudaBackend::begin_capture() {
  AMP_CHECK(!capturing_, "begin_capture: a capture is already open");
  if (graph_) {  // a replay of the old graph may still run
    wait_stream(stream_->get(), wait_check_);
    release_capture();
  }
  // Thread-local mode: only this thread's unsafe calls break the capture (NCCL's and MPI's own
  // threads go on as usual).
  AMP_CUDA_CHECK(cudaStreamBeginCapture(stream_->get(), cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
  graph_id_ = g_next_graph_id++;  // what is recorded from here on belongs to this graph
  launches_ = 0;
  return true;
}

void CudaBackend::end_capture() {
  AMP_CHECK(capturing_, "end_capture without begin_capture");
  capturing_ = false;
  cudaGraph_t g = nullptr;
  const cudaError_t e = cudaStreamEndCapture(stream_->get(), &g);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (g) cudaGraphDestroy(g);
    graph_id_ = 0;
    throw Error(ErrorKind::Device, strcat("capturing the step into a CUDA graph failed: ", cuda_error_string(e),
                                          " (a call in the step synchronized with the host, or a stream it forked "
                                          "did not join back); set run.cuda_graph: false to run without graphs"));
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t ie = cudaGraphInstantiate(&exec, g, 0);
  if (ie != cudaSuccess) {
    cudaGraphDestroy(g);
    graph_id_ = 0;
    throw_device_error(__FILE__, __LINE__, "cudaGraphInstantiate(&exec, graph, 0)", cuda_error_string(ie));
  }
  graph_ = GraphExec(g, exec);
  AMP_CUDA_CHECK(cudaGraphUpload(graph_.get(), stream_->get()));
}

void CudaBackend::replay() {
  AMP_CHECK(bool(graph_), "replay without a captured graph");
  AMP_CUDA_CHECK(cudaGraphLaunch(graph_.get(), stream_->get()));
  ++launches_;
}

}  // namespace amp::cuda
