#include "cuda/vmm_allocation.h"

#include <algorithm>

#include "core/error.h"
#include "cudart/cuda_check.h"

namespace amp::cuda {

namespace {

// The virtual memory calls of the driver API, looked up once.
struct VmmApi {
  decltype(&::cuGetErrorString) error_string = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetAttribute) attribute = nullptr;
  decltype(&::cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&::cuMemAddressReserve) reserve = nullptr;
  decltype(&::cuMemAddressFree) address_free = nullptr;
  decltype(&::cuMemCreate) create = nullptr;
  decltype(&::cuMemRelease) release = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemSetAccess) set_access = nullptr;
  bool found = false;
};

template <typename Fn>
bool find_symbol(const char* name, Fn& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  // Version 12.0 of each symbol: every one of them has kept its 10.2 signature since.
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || !p) {
    cudaGetLastError();
    return false;
  }
  fn = reinterpret_cast<Fn>(p);
  return true;
}

const VmmApi& api() {
  static const VmmApi a = [] {
    VmmApi v;
    v.found = find_symbol("cuGetErrorString", v.error_string) && find_symbol("cuDeviceGet", v.device_get) &&
              find_symbol("cuDeviceGetAttribute", v.attribute) &&
              find_symbol("cuMemGetAllocationGranularity", v.granularity) &&
              find_symbol("cuMemAddressReserve", v.reserve) && find_symbol("cuMemAddressFree", v.address_free) &&
              find_symbol("cuMemCreate", v.create) && find_symbol("cuMemRelease", v.release) &&
              find_symbol("cuMemMap", v.map) && find_symbol("cuMemUnmap", v.unmap) &&
              find_symbol("cuMemSetAccess", v.set_access);
    return v;
  }();
  return a;
}

std::string driver_error(CUresult r) {
  const char* s = nullptr;
  if (api().error_string && api().error_string(r, &s) == CUDA_SUCCESS && s) return strcat(s, " (", int(r), ")");
  return strcat("CUresult ", int(r));
}

#define AMP_CU_CHECK(call)                                                                                     \
  do {                                                                                                         \
    const CUresult amp_r_ = (call);                                                                            \
    if (amp_r_ != CUDA_SUCCESS) ::amp::cuda::throw_device_error(__FILE__, __LINE__, #call, driver_error(amp_r_)); \
  } while (0)

#define AMP_CU_WARN(call)                                                                                      \
  do {                                                                                                         \
    const CUresult amp_r_ = (call);                                                                            \
    if (amp_r_ != CUDA_SUCCESS) ::amp::cuda::warn_device_error(__FILE__, __LINE__, #call, driver_error(amp_r_)); \
  } while (0)

// Device memory pinned to `device`, and read-write access to it from that device.
bool device_prop(int device, CUmemAllocationProp& prop, CUmemAccessDesc& access) {
  const VmmApi& a = api();
  CUdevice dev = 0;
  int supported = 0;
  if (!a.found || a.device_get(&dev, device) != CUDA_SUCCESS ||
      a.attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) != CUDA_SUCCESS || !supported)
    return false;
  prop = CUmemAllocationProp{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  access = CUmemAccessDesc{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return true;
}

}  // namespace

size_t vmm_granularity(int device) {
  CUmemAllocationProp prop{};
  CUmemAccessDesc access{};
  size_t g = 0;
  if (!device_prop(device, prop, access) ||
      api().granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS)
    return 0;
  return g;
}

VmmAllocation::VmmAllocation(int device, size_t bytes, cudaStream_t stream) : stream_(stream) {
  page_ = vmm_granularity(device);
  AMP_CHECK(page_ > 0 && device_prop(device, prop_, access_), "VmmAllocation on a device without virtual memory management");
  span_ = std::max<size_t>(1, (bytes + page_ - 1) / page_) * page_;
  AMP_CU_CHECK(api().reserve(&base_, span_, page_, 0, 0));
  handles_.assign(span_ / page_, 0);
  try {
    for (size_t p = 0; p < handles_.size(); ++p) map(p);
    zero(0, handles_.size());
  } catch (...) {
    free_all();
    throw;
  }
  ledger_ = std::make_unique<PageLedger>(handles_.size(), static_cast<PageLedger::Driver&>(*this));
}

VmmAllocation::~VmmAllocation() {
  // Work enqueued before may still use the pages, and the ledger's events: finish it first.
  AMP_CUDA_WARN(cudaStreamSynchronize(stream_));
  if (ledger_) ledger_->settle();
  free_all();
}

void VmmAllocation::free_all() noexcept {
  for (auto& [marker, e] : events_) AMP_CUDA_WARN(cudaEventDestroy(e));
  events_.clear();
  for (size_t p = 0; p < handles_.size(); ++p) {
    if (!handles_[p]) continue;
    AMP_CU_WARN(api().unmap(base_ + p * page_, page_));
    AMP_CU_WARN(api().release(handles_[p]));
    handles_[p] = 0;
  }
  if (base_) AMP_CU_WARN(api().address_free(base_, span_));
  base_ = 0;
}

bool VmmAllocation::contains(const void* p) const {
  const CUdeviceptr a = reinterpret_cast<CUdeviceptr>(p);
  return a >= base_ && a < base_ + span_;
}

// The allocation's pages of a range of it (clipped to its end).
PageSpan VmmAllocation::pages(const void* p, size_t bytes, bool inside) const {
  const size_t at = size_t(reinterpret_cast<CUdeviceptr>(p) - base_);
  const size_t n = std::min(bytes, span_ - std::min(at, span_));
  return inside ? pages_inside(at, n, page_) : pages_overlapping(at, n, page_);
}

void VmmAllocation::release(const void* p, size_t bytes) {
  const PageSpan s = pages(p, bytes, true);
  if (s.first < s.last) ledger_->release(s.first, s.last);
}

void VmmAllocation::commit(const void* p, size_t bytes) {
  const PageSpan s = pages(p, bytes, false);
  if (s.first < s.last) ledger_->commit(s.first, s.last);
}

size_t VmmAllocation::resident(const void* p, size_t bytes) {
  ledger_->reap();
  const PageSpan s = pages(p, bytes, false);
  return ledger_->held(s.first, s.last) * page_;
}

// ---- the ledger's driver

void VmmAllocation::map(size_t page) {
  CUmemGenericAllocationHandle h = 0;
  const CUresult r = api().create(&h, page_, &prop_, 0);
  if (r == CUDA_ERROR_OUT_OF_MEMORY)
    throw Error(ErrorKind::Device, strcat("out of device memory bringing back a ", page_ >> 20, " MiB page of the "
                                          "gradient buffer (distributed.zero 2): ", driver_error(r)));
  AMP_CU_CHECK(r);
  const CUdeviceptr at = base_ + page * page_;
  if (const CUresult m = api().map(at, page_, 0, h, 0); m != CUDA_SUCCESS) {
    AMP_CU_WARN(api().release(h));
    AMP_CU_CHECK(m);
  }
  handles_[page] = h;  // from here on free_all() unmaps it
  AMP_CU_CHECK(api().set_access(at, page_, &access_, 1));
}

void VmmAllocation::unmap(size_t page) {
  AMP_CU_CHECK(api().unmap(base_ + page * page_, page_));
  const CUmemGenericAllocationHandle h = handles_[page];
  handles_[page] = 0;
  AMP_CU_CHECK(api().release(h));
}

void VmmAllocation::zero(size_t first, size_t count) {
  AMP_CUDA_CHECK(cudaMemsetAsync(reinterpret_cast<void*>(base_ + first * page_), 0, count * page_, stream_));
}

uint64_t VmmAllocation::mark() {
  cudaEvent_t e = nullptr;
  AMP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  if (const cudaError_t r = cudaEventRecord(e, stream_); r != cudaSuccess) {
    AMP_CUDA_WARN(cudaEventDestroy(e));
    AMP_CUDA_CHECK(r);
  }
  events_[++next_marker_] = e;
  return next_marker_;
}

bool VmmAllocation::passed(uint64_t marker) {
  const cudaError_t q = cudaEventQuery(events_.at(marker));
  if (q == cudaErrorNotReady) {
    cudaGetLastError();  // not an error: leave nothing for a later launch check
    return false;
  }
  AMP_CUDA_CHECK(q);
  return true;
}

void VmmAllocation::forget(uint64_t marker) {
  const auto it = events_.find(marker);
  if (it == events_.end()) return;
  AMP_CUDA_WARN(cudaEventDestroy(it->second));
  events_.erase(it);
}

}  // namespace amp::cuda
