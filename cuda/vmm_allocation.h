// Releasable device memory (DeviceMemory::alloc_releasable, distributed.zero 2's gradient buffer)
// through the CUDA virtual memory API: an address range reserved once, each page of it backed by a
// physical allocation of its own (cuMemUnmap cannot unmap part of a mapping), returned and brought
// back by a PageLedger whose markers are events on the backend's stream. The driver calls are
// found through the runtime (cudaGetDriverEntryPointByVersion): no link to libcuda.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "backend/memory.h"
#include "backend/page_ledger.h"

namespace amp::cuda {

// Bytes of a page on `device` (the driver's minimum granularity); 0 when the device or the driver
// has no virtual memory management.
size_t vmm_granularity(int device);

class VmmAllocation final : private PageLedger::Driver {
 public:
  // At least `bytes`, in whole pages of vmm_granularity(device), all mapped and zero-filled.
  VmmAllocation(int device, size_t bytes, cudaStream_t stream);
  ~VmmAllocation() override;  // waits for the stream, then returns every page and the range
  VmmAllocation(const VmmAllocation&) = delete;
  VmmAllocation& operator=(const VmmAllocation&) = delete;

  void* data() const { return reinterpret_cast<void*>(base_); }
  bool contains(const void* p) const;
  void release(const void* p, size_t bytes);  // the whole pages inside [p, p + bytes)
  void commit(const void* p, size_t bytes);   // the pages overlapping [p, p + bytes)
  size_t resident(const void* p, size_t bytes);  // bytes of the overlapping pages holding memory

 private:
  void map(size_t page) override;
  void unmap(size_t page) override;
  void zero(size_t first, size_t count) override;
  uint64_t mark() override;
  bool passed(uint64_t marker) override;
  void forget(uint64_t marker) override;
  void free_all() noexcept;  // the destructor's work, also after a failed constructor
  PageSpan pages(const void* p, size_t bytes, bool inside) const;

  cudaStream_t stream_;
  CUmemAllocationProp prop_{};
  CUmemAccessDesc access_{};
  size_t page_ = 0, span_ = 0;
  CUdeviceptr base_ = 0;
  std::vector<CUmemGenericAllocationHandle> handles_;  // per page; 0: not backed
  std::map<uint64_t, cudaEvent_t> events_;             // the ledger's markers
  uint64_t next_marker_ = 0;
  std::unique_ptr<PageLedger> ledger_;
};

}  // namespace amp::cuda
