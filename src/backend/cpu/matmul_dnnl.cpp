#include "backend/cpu/matmul_dnnl.h"

#include <omp.h>

#include <cstdint>
#include <deque>
#include <exception>
#include <oneapi/dnnl/dnnl.hpp>
#include <utility>
#include <vector>

#include "core/error.h"

namespace amp::cpu {

namespace {
using dnnl::memory;

memory::data_type dnnl_type(DType t) {
  switch (t) {
    case DType::F32: return memory::data_type::f32;
    case DType::BF16: return memory::data_type::bf16;
    case DType::F16: return memory::data_type::f16;
    default: throw Error(ErrorKind::Internal, strcat("matmul: unsupported dtype ", dtype_name(t)));
  }
}
}  // namespace

struct DnnlMatmul::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  struct Entry {
    dnnl::matmul prim;
    memory::desc a, b, bias, c;
    size_t scratch_bytes = 0;
    std::string impl;
  };
  // Keyed by the shape and the threads oneDNN plans it for (a slice's primitive is planned for one).
  std::map<std::pair<decltype(MatmulShape().key()), int>, Entry> cache;
  std::mutex mu;
  // Per slice: a stream and the scratchpad its primitive uses (slices run at once, so oneDNN's
  // one library scratchpad cannot be shared: the primitives take the user's).
  struct Slot {
    std::unique_ptr<dnnl::stream> stream;
    std::vector<char> scratch;
  };
  std::deque<Slot> slots;  // references stay valid as it grows
  static constexpr size_t kAlign = 4096;  // the scratchpads' alignment (a page, as oneDNN's own)

  void ensure_slots(int n) {  // outside the parallel region
    while (int(slots.size()) < n) {
      slots.emplace_back();
      slots.back().stream = std::make_unique<dnnl::stream>(engine);
    }
  }

  void execute(int slot, const MatmulShape& s, const void* a, const void* b, const void* bias, void* c) {
    Entry& e = get(s);
    Slot& sl = slots[size_t(slot)];
    if (sl.scratch.size() < e.scratch_bytes + kAlign) sl.scratch.resize(e.scratch_bytes + kAlign);
    memory ma(e.a, engine, const_cast<void*>(a));
    memory mb(e.b, engine, const_cast<void*>(b));
    memory mc(e.c, engine, c);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    if (s.has_bias) args.emplace(DNNL_ARG_BIAS, memory(e.bias, engine, const_cast<void*>(bias)));
    if (e.scratch_bytes)
      args.emplace(DNNL_ARG_SCRATCHPAD, memory({{memory::dim(e.scratch_bytes)}, memory::data_type::u8, {1}}, engine,
                                               sl.scratch.data() + (kAlign - uintptr_t(sl.scratch.data()) % kAlign) % kAlign));
    e.prim.execute(*sl.stream, args);
    sl.stream->wait();
  }

  Entry& get(const MatmulShape& s) {
    std::lock_guard<std::mutex> lock(mu);
    const auto key = std::make_pair(s.key(), omp_get_max_threads());
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    const auto M = memory::dim(s.m), N = memory::dim(s.n), K = memory::dim(s.k);
    Entry e;
    e.a = memory::desc({M, K}, dnnl_type(s.ab), s.trans_a ? memory::dims{1, M} : memory::dims{K, 1});
    e.b = memory::desc({K, N}, dnnl_type(s.ab), s.trans_b ? memory::dims{1, K} : memory::dims{N, 1});
    e.c = memory::desc({M, N}, dnnl_type(s.c), memory::dims{N, 1});
    try {
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      if (s.has_bias) e.bias = memory::desc({1, N}, dnnl_type(s.bias), memory::dims{N, 1});
      const dnnl::matmul::desc d = s.has_bias ? dnnl::matmul::desc(e.a, e.b, e.bias, e.c) : dnnl::matmul::desc(e.a, e.b, e.c);
      dnnl::matmul::primitive_desc pd(d, attr, engine);
      e.impl = pd.impl_info_str();
      e.scratch_bytes = pd.scratchpad_desc().get_size();
      e.prim = dnnl::matmul(pd);
    } catch (const dnnl::error& err) {
      throw Error(ErrorKind::Internal, strcat("oneDNN matmul ", s.m, "x", s.n, "x", s.k, " ", dtype_name(s.ab),
                                              "->", dtype_name(s.c), " is not available: ", err.what()));
    }
    return cache.emplace(key, std::move(e)).first->second;
  }
};

DnnlMatmul::DnnlMatmul() : impl_(std::make_unique<Impl>()) {}
DnnlMatmul::~DnnlMatmul() = default;

int DnnlMatmul::slices(const MatmulShape& s, int threads) {
  // Whole, threaded by oneDNN as it chooses: products too small to cut (fewer than two blocks of
  // rows, or a few microseconds of work); A^T B (the weight gradients: cut by columns, oneDNN
  // blocked the sum over K otherwise than for the whole product); and any product not run by
  // oneDNN's brgemm kernels (its jit GEMM on AVX2-only CPUs blocks K by the shape). A brgemm
  // slice's dots over K keep the whole product's order (the unit test checks every shape it tries).
  if (s.trans_a || threads < 2 || s.m < 2 * kSliceRows || 2.0 * double(s.m) * double(s.n) * double(s.k) < double(1 << 22))
    return 1;
  if (impl_->get(s).impl.rfind("brg:", 0) != 0) return 1;
  const size_t blocks = (s.m + kSliceRows - 1) / kSliceRows;
  return int(blocks < size_t(threads) ? blocks : size_t(threads));
}

size_t DnnlMatmul::first_row(size_t m, int slices, int i) {
  const size_t blocks = (m + kSliceRows - 1) / kSliceRows;
  const size_t row = blocks * size_t(i) / size_t(slices) * kSliceRows;
  return row < m ? row : m;
}

void DnnlMatmul::run(const MatmulShape& s, const void* a, const void* b, const void* bias, void* c) {
  if (s.m == 0 || s.n == 0) return;
  const int n = omp_in_parallel() ? 1 : slices(s, omp_get_max_threads());
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->ensure_slots(n);
  }
  if (n == 1) {
    impl_->execute(0, s, a, b, bias, c);
    return;
  }
  const size_t ea = dtype_size(s.ab), ec = dtype_size(s.c);
  std::exception_ptr failed;
#pragma omp parallel num_threads(n)
  {
    const int i = omp_get_thread_num();
    omp_set_num_threads(1);  // this thread's nested regions: oneDNN plans and runs the slice alone
    const size_t r0 = first_row(s.m, n, i), r1 = first_row(s.m, n, i + 1);
    MatmulShape part = s;  // rows r0 .. r1 of A and C (A not transposed: dense rows)
    part.m = r1 - r0;
    try {
      if (part.m)
        impl_->execute(i, part, static_cast<const char*>(a) + r0 * s.k * ea, b, bias, static_cast<char*>(c) + r0 * s.n * ec);
    } catch (...) {
#pragma omp critical(amp_matmul_failed)
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) std::rethrow_exception(failed);
}

std::string DnnlMatmul::implementation(const MatmulShape& s) { return impl_->get(s).impl; }

}  // namespace amp::cpu
