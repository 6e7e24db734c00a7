// CUDA graphs: a step (cast, linear forward, loss, backward, unscale_check, optimizer_step,
// update_scale) captured once and replayed must give exactly the bits of the same steps run
// eagerly, skipped (overflowing) steps included. (On the CPU stand-in the "replay" runs the step
// again: the rig's inputs, snapshots and expectations are what that run checks.)
#include "device_env.h"
#include "step_rig.h"

using namespace amp;
using namespace gpu_test;
using amp::bench::StepRig;

TEST_CASE("a captured step replays bit-identically to eager steps, skips included", "[.cuda][graph]") {
  // The trainer captures after two eager steps of the process, so a run resumed at step k captures
  // at k + 3: the capture must not depend on how many steps ran before it (1 and 5 here, the
  // overflowing step 4 is replayed in one case and eager in the other).
  for (int warmup : {2, 1, 5}) {
    for (DType compute : {DType::F16, DType::BF16}) {
      INFO(dtype_name(compute) << ", capture after " << warmup << " eager step(s)");
      auto gpu = make_device();
      const std::vector<size_t> dims{96, 257, 130, 10};
      const size_t batch = 64;
      const int steps = 10, bad = 4;
      ScalerParams sp;
      sp.init_scale = 32768.0f;
      sp.growth_interval = 3;
      StepRig eager(*gpu, compute, dims, batch, Activation::Gelu, sp);
      StepRig graph(*gpu, compute, dims, batch, Activation::Gelu, sp);
      std::vector<std::vector<unsigned char>> want;
      for (int s = 1; s <= steps; ++s) {
        eager.inputs(s, s == bad);
        eager.device_step();
        want.push_back(eager.state());
      }
      CHECK(eager.scalars().scaler.overflow_steps == 1);
      std::unique_ptr<CapturedStep> captured;
      for (int s = 1; s <= steps; ++s) {
        graph.inputs(s, s == bad);
        if (s <= warmup) {
          graph.device_step();  // warm-up, as the trainer does
        } else {
          if (s == warmup + 1) {
            captured = std::make_unique<CapturedStep>(*gpu, [&] { graph.device_step(); });
            REQUIRE(captured->is_graph() == device_is_gpu());
          }
          captured->replay();
        }
        INFO("step " << s);
        REQUIRE(graph.state() == want[size_t(s - 1)]);
      }
    }
  }
}
