#include "backend/cpu/matmul_dnnl.h"

#include <oneapi/dnnl/dnnl.hpp>

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
  dnnl::stream stream{engine};
  struct Entry {
    dnnl::matmul prim;
    memory::desc a, b, bias, c;
    std::string impl;
  };
  std::map<decltype(MatmulShape().key()), Entry> cache;
  std::mutex mu;

  Entry& get(const MatmulShape& s) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(s.key());
    if (it != cache.end()) return it->second;
    const auto M = memory::dim(s.m), N = memory::dim(s.n), K = memory::dim(s.k);
    Entry e;
    e.a = memory::desc({M, K}, dnnl_type(s.ab), s.trans_a ? memory::dims{1, M} : memory::dims{K, 1});
    e.b = memory::desc({K, N}, dnnl_type(s.ab), s.trans_b ? memory::dims{1, K} : memory::dims{N, 1});
    e.c = memory::desc({M, N}, dnnl_type(s.c), memory::dims{N, 1});
    try {
      if (s.has_bias) {
        e.bias = memory::desc({1, N}, dnnl_type(s.bias), memory::dims{N, 1});
        dnnl::matmul::desc d(e.a, e.b, e.bias, e.c);
        dnnl::matmul::primitive_desc pd(d, engine);
        e.impl = pd.impl_info_str();
        e.prim = dnnl::matmul(pd);
      } else {
        dnnl::matmul::desc d(e.a, e.b, e.c);
        dnnl::matmul::primitive_desc pd(d, engine);
        e.impl = pd.impl_info_str();
        e.prim = dnnl::matmul(pd);
      }
    } catch (const dnnl::error& err) {
      throw Error(ErrorKind::Internal, strcat("oneDNN matmul ", s.m, "x", s.n, "x", s.k, " ", dtype_name(s.ab),
                                              "->", dtype_name(s.c), " is not available: ", err.what()));
    }
    return cache.emplace(s.key(), std::move(e)).first->second;
  }
};

DnnlMatmul::DnnlMatmul() : impl_(std::make_unique<Impl>()) {}
DnnlMatmul::~DnnlMatmul() = default;

void DnnlMatmul::run(const MatmulShape& s, const void* a, const void* b, const void* bias, void* c) {
  if (s.m == 0 || s.n == 0) return;
  Impl::Entry& e = impl_->get(s);
  memory ma(e.a, impl_->engine, const_cast<void*>(a));
  memory mb(e.b, impl_->engine, const_cast<void*>(b));
  memory mc(e.c, impl_->engine, c);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
  if (s.has_bias) args.emplace(DNNL_ARG_BIAS, memory(e.bias, impl_->engine, const_cast<void*>(bias)));
  e.prim.execute(impl_->stream, args);
  impl_->stream.wait();
}

std::string DnnlMatmul::implementation(const MatmulShape& s) { return impl_->get(s).impl; }

}  // namespace amp::cpu
