// The loss-scale state machine: PyTorch's update rule on scripted overflow sequences, the float
// limit, hysteresis, clamps, the divergence counter, static/none modes and save/restore.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "amp/loss_scaler.h"

using namespace amp;

namespace {

// An independent transcription of torch._amp_update_scale_ (float32 scale, int tracker).
struct TorchRef {
  float scale;
  int tracker = 0;
  void update(bool found_inf, float growth, float backoff, int interval) {
    if (found_inf) {
      scale = scale * backoff;
      tracker = 0;
    } else {
      const int successful = tracker + 1;
      if (successful == interval) {
        const float ns = scale * growth;
        if (std::isfinite(ns)) scale = ns;
        tracker = 0;
      } else {
        tracker = successful;
      }
    }
  }
};

ScalerParams dynamic(int interval) {
  ScalerParams p;
  p.mode = ScaleMode::Dynamic;
  p.growth_interval = interval;
  p.min_scale = 0.0f;  // PyTorch has no floor
  return p;
}

}  // namespace

TEST_CASE("defaults are PyTorch's", "[scaler]") {
  ScalerParams p;
  CHECK(p.init_scale == 65536.0f);
  CHECK(p.growth_factor == 2.0f);
  CHECK(p.backoff_factor == 0.5f);
  CHECK(p.growth_interval == 2000);
  CHECK(p.hysteresis == 1);
}

TEST_CASE("dynamic scaling follows PyTorch on scripted overflow sequences", "[scaler]") {
  const std::vector<std::vector<int>> scripts = {
      {0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0},  // grow, back off, grow twice
      {1, 1, 1, 1, 0, 0, 0, 0, 0, 0},           // repeated back-off then recovery
      {0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 0},     // overflow just before growth resets the tracker
  };
  for (const auto& script : scripts) {
    ScalerParams p = dynamic(3);
    ScalerState s = scaler_init(p);
    TorchRef ref{p.init_scale};
    int64_t skipped = 0, applied = 0;
    for (int f : script) {
      scaler_update(s, p, f != 0);
      ref.update(f != 0, p.growth_factor, p.backoff_factor, p.growth_interval);
      skipped += f;
      applied += !f;
      REQUIRE(s.scale == ref.scale);
      REQUIRE(s.growth_tracker == ref.tracker);
    }
    CHECK(s.overflow_steps == skipped);
    CHECK(s.optimizer_steps == applied);
    CHECK(s.iterations == int64_t(script.size()));
  }
  // Random sequences, long enough to grow and shrink many times.
  ScalerParams p = dynamic(5);
  ScalerState s = scaler_init(p);
  TorchRef ref{p.init_scale};
  uint64_t x = 12345;
  for (int i = 0; i < 20000; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const bool inf = (x >> 60) == 0;  // 1 in 16
    scaler_update(s, p, inf);
    ref.update(inf, p.growth_factor, p.backoff_factor, p.growth_interval);
    REQUIRE(s.scale == ref.scale);
    REQUIRE(s.growth_tracker == ref.tracker);
  }
}

TEST_CASE("growth is refused when the new scale would not be finite", "[scaler]") {
  ScalerParams p = dynamic(2);
  p.max_scale = std::numeric_limits<float>::max();
  ScalerState s = scaler_init(p);
  s.scale = std::ldexp(1.0f, 127);  // the largest power of two in float
  scaler_update(s, p, false);
  CHECK(s.growth_tracker == 1);
  scaler_update(s, p, false);  // would grow to 2^128 = inf: refused, tracker reset
  CHECK(s.scale == std::ldexp(1.0f, 127));
  CHECK(s.growth_tracker == 0);
  TorchRef ref{std::ldexp(1.0f, 127)};
  ref.update(false, 2, 0.5, 2);
  ref.update(false, 2, 0.5, 2);
  CHECK(ref.scale == s.scale);
}

TEST_CASE("hysteresis backs off only after N overflows since the last growth", "[scaler]") {
  ScalerParams p = dynamic(2);
  p.hysteresis = 3;
  ScalerState s = scaler_init(p);
  scaler_update(s, p, true);
  scaler_update(s, p, true);
  CHECK(s.scale == 65536.0f);  // two overflows tolerated
  CHECK(s.overflow_steps == 2);
  scaler_update(s, p, true);
  CHECK(s.scale == 32768.0f);  // the third backs off
  scaler_update(s, p, true);
  CHECK(s.scale == 16384.0f);  // and every further one until the scale grows again
  scaler_update(s, p, false);
  scaler_update(s, p, false);  // growth restores the tolerance
  CHECK(s.scale == 32768.0f);
  CHECK(s.hysteresis_left == 3);
  scaler_update(s, p, true);
  CHECK(s.scale == 32768.0f);
}

TEST_CASE("min and max clamps, and overflows at the minimum are counted for divergence", "[scaler]") {
  ScalerParams p = dynamic(2);
  p.init_scale = 4.0f;
  p.min_scale = 1.0f;
  p.max_scale = 16.0f;
  ScalerState s = scaler_init(p);
  for (int i = 0; i < 10; ++i) scaler_update(s, p, false);
  CHECK(s.scale == 16.0f);  // grew 4 -> 8 -> 16 and stays at max
  for (int i = 0; i < 4; ++i) scaler_update(s, p, true);
  CHECK(s.scale == 1.0f);  // 16 -> 8 -> 4 -> 2 -> 1
  CHECK(s.overflow_at_min == 0);  // none of those started at the minimum
  scaler_update(s, p, true);
  scaler_update(s, p, true);
  CHECK(s.scale == 1.0f);
  CHECK(s.overflow_at_min == 2);
  scaler_update(s, p, false);  // a clean step resets the count
  CHECK(s.overflow_at_min == 0);
  p.backoff_factor = 0.3f;  // a back-off below the minimum is clamped to it
  s.scale = 2.0f;
  scaler_update(s, p, true);
  CHECK(s.scale == 1.0f);
}

TEST_CASE("static and none keep the scale but count skipped steps", "[scaler]") {
  ScalerParams p;
  p.mode = ScaleMode::Static;
  p.init_scale = 128.0f;
  p.growth_interval = 1;
  ScalerState s = scaler_init(p);
  CHECK(s.scale == 128.0f);
  scaler_update(s, p, false);
  scaler_update(s, p, true);
  scaler_update(s, p, true);
  CHECK(s.scale == 128.0f);
  CHECK(s.overflow_steps == 2);
  CHECK(s.overflow_at_min == 2);  // a fixed scale is its own minimum
  CHECK(s.optimizer_steps == 1);
  p.mode = ScaleMode::None;
  ScalerState n = scaler_init(p);
  CHECK(n.scale == 1.0f);
  scaler_update(n, p, true);
  CHECK(n.scale == 1.0f);
  CHECK(n.overflow_steps == 1);
}

TEST_CASE("overflow attribution is copied from the reduced flags", "[scaler]") {
  ScalerParams p = dynamic(10);
  ScalerState s = scaler_init(p);
  const int32_t flags[] = {1, 3, 0, 0, 5, 2};  // any, tensor 2 after reduce, ranks 2 and 3 saw it
  scaler_record_flags(s, flags, 4);
  scaler_update(s, p, true);
  CHECK(s.last_overflow_tensor == 3);
  CHECK(s.last_overflow_rank == 2);
  CHECK(s.last_overflow_rank_tensor == 5);
  CHECK(s.last_overflow_iteration == 1);
  const int32_t clean[] = {0, 0, 0, 0, 0, 0};
  scaler_record_flags(s, clean, 4);  // a clean step leaves the last report alone
  scaler_update(s, p, false);
  CHECK(s.last_overflow_rank == 2);
}

TEST_CASE("saved state restores the same future", "[scaler]") {
  ScalerParams p = dynamic(3);
  p.hysteresis = 2;
  ScalerState a = scaler_init(p);
  const int script[] = {0, 1, 0, 0, 0, 1, 1, 0};
  for (int f : script) scaler_update(a, p, f);
  unsigned char saved[sizeof(ScalerState)];
  std::memcpy(saved, &a, sizeof a);
  ScalerState b;
  std::memcpy(&b, saved, sizeof b);
  for (int i = 0; i < 50; ++i) {
    const bool f = i % 7 == 3;
    scaler_update(a, p, f);
    scaler_update(b, p, f);
    REQUIRE(std::memcmp(&a, &b, sizeof a) == 0);
  }
}
