// Step time of the CUDA backend on an MLP, from a CUDA graph as the trainer runs it, and its parts:
// forward + backward, the GEMMs alone (achieved rate), the mixed-precision bookkeeping
// (zero flags + unscale_check + update_scale) and the optimizer, each timed with CUDA events as
// the median of repeats (forward + backward and the optimizer as differences of such medians).
// One JSON line on stdout.
// Usage: bench_gpu_step [--dims 784,1024,1024,10] [--batch 128] [--dtype f16|bf16] [--iters 50]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "comm/device_stream.h"
#include "step_rig.h"

namespace {

using namespace amp;

// Milliseconds per replay of what `body` enqueues, captured once into a graph (after one eager
// run, so first-use set-up stays out of it).
double graph_ms(Backend& be, const std::function<void()>& body, int iters) {
  body();
  be.capture().begin_capture();
  body();
  be.capture().end_capture();
  return bench::median_ms(static_cast<cudaStream_t>(dynamic_cast<DeviceStream&>(be).stream_handle()), [&] { be.capture().replay(); }, iters);
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args args;
  if (!bench::parse_args(argc, argv, "bench_gpu_step", args)) return 2;
  const std::vector<size_t>& dims = args.dims;
  const size_t batch = args.batch;
  const std::string dtype = args.dtype;
  const int iters = args.iters;
  if (!cuda_available()) {
    std::fprintf(stderr, "bench_gpu_step: no CUDA device\n");
    return 1;
  }
  try {
    const DType compute = dtype == "bf16" ? DType::BF16 : DType::F16;
    auto be = make_backend("cuda", 0, 1);
    ScalerParams sp;
    sp.mode = compute == DType::F16 ? ScaleMode::Dynamic : ScaleMode::None;
    sp.init_scale = compute == DType::F16 ? 1024.0f : 1.0f;
    bench::StepRig rig(*be, compute, dims, batch, Activation::Relu, sp);
    rig.inputs(1);

    // Every captured body is a whole step of the mixed-precision protocol (begin_step .. update,
    // which MixedPrecision enforces); the parts are differences: forward + backward = (step
    // without the optimizer) - (the bookkeeping alone), optimizer = step - (step without it).
    const double step = graph_ms(*be, [&] { rig.device_step(); }, iters);
    const double no_opt = graph_ms(*be, [&] {
      rig.forward_backward();
      rig.unscale_check();
      rig.update_scale();
    }, iters);
    const double amp = graph_ms(*be, [&] { rig.bookkeeping(); }, iters);
    const double fwd_bwd = no_opt - amp, opt = step - no_opt;

    // The GEMMs of one step alone (the linear layers' calls, bias epilogue and bias gradient
    // included), on the rig's buffers.
    Mlp& m = rig.model();
    const size_t L = dims.size() - 1;
    double flops = 0;  // forward, weight gradient, and input gradient except for the first layer
    for (size_t l = 0; l < L; ++l) flops += 2.0 * double(batch) * double(dims[l]) * double(dims[l + 1]) * (l ? 3 : 2);
    const size_t widest = *std::max_element(dims.begin(), dims.end());
    Buffer a = be->memory().alloc(batch * widest * 2), b = be->memory().alloc(batch * widest * 2);
    const auto& layout = m.layout();
    auto param = [&](const void* base, size_t i) {
      const ParamInfo& p = layout.tensors[i];
      return Tensor{static_cast<char*>(const_cast<void*>(base)) + p.span.offset * 2, compute, p.rows, p.cols};
    };
    const double gemm = graph_ms(*be, [&] {
      for (size_t l = 0; l < L; ++l) {
        const Tensor x{a.data(), compute, batch, dims[l]}, y{b.data(), compute, batch, dims[l + 1]};
        be->ops().linear_forward(x, param(rig.lp(), 2 * l), param(rig.lp(), 2 * l + 1), y);
      }
      for (size_t l = L; l-- > 0;) {
        const Tensor dy{b.data(), compute, batch, dims[l + 1]}, x{a.data(), compute, batch, dims[l]};
        be->ops().linear_backward_weight(dy, x, param(rig.grads(), 2 * l), param(rig.grads(), 2 * l + 1));
        if (l > 0) be->ops().linear_backward_input(dy, param(rig.lp(), 2 * l), Tensor{a.data(), compute, batch, dims[l]});
      }
    }, iters);

    std::string d;
    for (size_t i = 0; i < dims.size(); ++i) d += (i ? "-" : "") + std::to_string(dims[i]);
    std::printf("{\"bench\": \"amp_step\", \"model\": \"%s\", \"batch\": %zu, \"dtype\": \"%s\", \"params\": %zu, "
                "\"step_ms\": %.5f, \"fwd_bwd_ms\": %.5f, \"gemm_ms\": %.5f, \"gemm_tflops\": %.2f, "
                "\"amp_ms\": %.5f, \"optimizer_ms\": %.5f, \"amp_share\": %.5f}\n",
                d.c_str(), batch, dtype.c_str(), layout.n_params(), step, fwd_bwd, gemm, flops / (gemm * 1e-3) / 1e12,
                amp, opt, amp / step);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
