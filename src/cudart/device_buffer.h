// RAII owners of CUDA resources: device and pinned memory, streams, events, a cuBLASLt handle and
// an instantiated graph. Copy is deleted (no accidental double frees or hidden copies), move is
// defined, destructors are noexcept and log a failure instead of throwing.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "cudart/cuda_check.h"

namespace amp::cuda {

// n elements of T in device memory (kPinned = false; uninitialized, the backend zero-fills what it
// hands out) or in page-locked host memory (kPinned = true: the source of asynchronous uploads).
template <typename T, bool kPinned>
class CudaMemory {
 public:
  CudaMemory() = default;
  explicit CudaMemory(size_t n) : n_(n) {
    if (!n) return;
    void** out = reinterpret_cast<void**>(&p_);
    if (kPinned) AMP_CUDA_CHECK(cudaMallocHost(out, n * sizeof(T)));
    else AMP_CUDA_CHECK(cudaMalloc(out, n * sizeof(T)));
  }
  ~CudaMemory() { reset(); }
  CudaMemory(const CudaMemory&) = delete;
  CudaMemory& operator=(const CudaMemory&) = delete;
  CudaMemory(CudaMemory&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  CudaMemory& operator=(CudaMemory&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  void reset() noexcept {
    if (p_) {
      if (kPinned) AMP_CUDA_WARN(cudaFreeHost(p_));
      else AMP_CUDA_WARN(cudaFree(p_));
    }
    p_ = nullptr;
    n_ = 0;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

template <typename T>
using DeviceBuffer = CudaMemory<T, false>;
template <typename T>
using PinnedBuffer = CudaMemory<T, true>;

// A non-blocking stream (no implicit ordering with the legacy default stream).
class Stream {
 public:
  Stream() = default;
  explicit Stream(int priority) {
    AMP_CUDA_CHECK(cudaStreamCreateWithPriority(&s_, cudaStreamNonBlocking, priority));
  }
  ~Stream() {
    if (s_) AMP_CUDA_WARN(cudaStreamDestroy(s_));
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept {
    if (this != &o) {
      if (s_) AMP_CUDA_WARN(cudaStreamDestroy(s_));
      s_ = std::exchange(o.s_, nullptr);
    }
    return *this;
  }
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// An event; ordering-only (no timing) unless timing is asked for.
class Event {
 public:
  Event() = default;
  explicit Event(bool timing) {
    AMP_CUDA_CHECK(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~Event() {
    if (e_) AMP_CUDA_WARN(cudaEventDestroy(e_));
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  Event& operator=(Event&& o) noexcept {
    if (this != &o) {
      if (e_) AMP_CUDA_WARN(cudaEventDestroy(e_));
      e_ = std::exchange(o.e_, nullptr);
    }
    return *this;
  }
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

class CublasLtHandle {
 public:
  CublasLtHandle() { AMP_CUBLAS_CHECK(cublasLtCreate(&h_)); }
  ~CublasLtHandle() {
    if (h_) {
      const cublasStatus_t s = cublasLtDestroy(h_);
      if (s != CUBLAS_STATUS_SUCCESS) warn_device_error(__FILE__, __LINE__, "cublasLtDestroy", cublas_error_string(s));
    }
  }
  CublasLtHandle(const CublasLtHandle&) = delete;
  CublasLtHandle& operator=(const CublasLtHandle&) = delete;
  CublasLtHandle(CublasLtHandle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  CublasLtHandle& operator=(CublasLtHandle&& o) noexcept {
    if (this != &o) std::swap(h_, o.h_);
    return *this;
  }
  cublasLtHandle_t get() const { return h_; }

 private:
  cublasLtHandle_t h_ = nullptr;
};

// A captured graph and its executable instance.
class GraphExec {
 public:
  GraphExec() = default;
  GraphExec(cudaGraph_t g, cudaGraphExec_t e) : graph_(g), exec_(e) {}
  ~GraphExec() { reset(); }
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  GraphExec(GraphExec&& o) noexcept
      : graph_(std::exchange(o.graph_, nullptr)), exec_(std::exchange(o.exec_, nullptr)) {}
  GraphExec& operator=(GraphExec&& o) noexcept {
    if (this != &o) {
      reset();
      graph_ = std::exchange(o.graph_, nullptr);
      exec_ = std::exchange(o.exec_, nullptr);
    }
    return *this;
  }
  void reset() noexcept {
    if (exec_) AMP_CUDA_WARN(cudaGraphExecDestroy(exec_));
    if (graph_) AMP_CUDA_WARN(cudaGraphDestroy(graph_));
    exec_ = nullptr;
    graph_ = nullptr;
  }
  cudaGraphExec_t get() const { return exec_; }
  explicit operator bool() const { return exec_ != nullptr; }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace amp::cuda
