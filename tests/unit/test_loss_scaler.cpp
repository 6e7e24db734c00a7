// The loss-scale state machine: PyTorch's update rule on scripted overflow sequences, the float
// limit, hysteresis, clamps, the divergence counter, static/none modes and save/restore.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "amp/loss_scaler.h"
#include "amp/scaler_resume.h"

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

// ---- the scaler's resume policy (amp/scaler_resume.h) --------------------------------------------

namespace {

// A state the state machine produced: `steps` updates with an overflow every `every` steps.
ScalerState run_scaler(const ScalerParams& p, int steps, int every) {
  ScalerState s = scaler_init(p);
  for (int i = 1; i <= steps; ++i) {
    const bool bad = every > 0 && i % every == 0;
    if (bad) {
      const int32_t flags[] = {1, 2, 0, 3};  // any, tensor 1 after reduce, rank 1 saw tensor 2
      scaler_record_flags(s, flags, 2);
    }
    scaler_update(s, p, bad);
  }
  return s;
}

}  // namespace

TEST_CASE("scaler resume: a state written with the same settings comes back unchanged", "[scaler]") {
  ScalerParams p = dynamic(7);
  p.hysteresis = 3;
  p.min_scale = 4.0f;
  for (int every : {0, 2, 5}) {
    const ScalerState s = run_scaler(p, 60, every);
    std::string error;
    const ScalerResume r = scaler_resume(s, "dynamic", p, 60, 4, 2, &error);
    INFO("overflow every " << every);
    CHECK(error.empty());
    CHECK(r.note.empty());
    CHECK(std::memcmp(&r.state, &s, sizeof s) == 0);
  }
}

TEST_CASE("scaler resume: a shorter growth interval still grows (the tracker is clamped)", "[scaler]") {
  // 1500 clean steps with growth_interval 2000, resumed with 10: the carried tracker was compared
  // with == and the scale never grew again; now it grows at the next clean step and every 10 after.
  ScalerParams long_p = dynamic(2000);
  long_p.init_scale = 1.0f;
  const ScalerState s = run_scaler(long_p, 1500, 0);
  REQUIRE(s.growth_tracker == 1500);
  ScalerParams short_p = long_p;
  short_p.growth_interval = 10;
  std::string error;
  ScalerResume r = scaler_resume(s, "dynamic", short_p, 1500, 4, 1, &error);
  REQUIRE(error.empty());
  CHECK(r.state.growth_tracker == 9);
  CHECK_THAT(r.note, Catch::Contains("growth tracker 1500 -> 9 (growth_interval)"));
  for (int i = 0; i < 81; ++i) scaler_update(r.state, short_p, false);
  CHECK(r.state.scale == 512.0f);  // the next clean step grows, then every 10th: 2^9 after 81 steps
  // Without the clamp (the old == test against a tracker past the interval) it would stay at 1:
  // scaler_update's >= makes even an unclamped state grow.
  ScalerState raw = s;
  scaler_update(raw, short_p, false);
  CHECK(raw.scale == 2.0f);
}

TEST_CASE("scaler resume: another mode starts fresh, the counters carry on, clamps apply", "[scaler]") {
  ScalerParams dyn = dynamic(5);
  const ScalerState s = run_scaler(dyn, 40, 6);
  ScalerParams stat = dyn;
  stat.mode = ScaleMode::Static;
  stat.init_scale = 128.0f;
  std::string error;
  ScalerResume r = scaler_resume(s, "dynamic", stat, 40, 4, 2, &error);
  REQUIRE(error.empty());
  CHECK(r.state.scale == 128.0f);
  CHECK(r.state.growth_tracker == 0);
  CHECK(r.state.optimizer_steps == s.optimizer_steps);
  CHECK(r.state.overflow_steps == s.overflow_steps);
  CHECK(r.state.last_overflow_rank == s.last_overflow_rank);
  CHECK_THAT(r.note, Catch::Contains("was dynamic") && Catch::Contains("this run's is static (scale 128)"));
  // Dynamic with a new maximum: the scale is clamped, the note says which key.
  ScalerParams capped = dyn;
  capped.max_scale = 1024.0f;
  r = scaler_resume(s, "dynamic", capped, 40, 4, 2, &error);
  REQUIRE(error.empty());
  CHECK(r.state.scale == 1024.0f);
  CHECK_THAT(r.note, Catch::Contains("min_scale/max_scale"));
}

TEST_CASE("scaler resume: a changed hysteresis tolerates what a fresh run would", "[scaler]") {
  // 300 clean steps with hysteresis 1, resumed with 5: two overflows must not back off (a fresh
  // run with hysteresis 5 keeps its scale through them). The hostile round found the carried
  // counter (1) clamped to at most 5 and the scale halved twice.
  const ScalerParams one = dynamic(2000);
  const ScalerState s = run_scaler(one, 300, 0);
  REQUIRE(s.hysteresis_left == 1);
  ScalerParams five = one;
  five.hysteresis = 5;
  std::string error;
  ScalerResume r = scaler_resume(s, "dynamic", five, 300, 4, 1, &error, 1);
  REQUIRE(error.empty());
  CHECK(r.state.hysteresis_left == 5);
  CHECK_THAT(r.note, Catch::Contains("hysteresis left 1 -> 5 (hysteresis 1 -> 5)"));
  ScalerState fresh = scaler_init(five);
  for (int i = 0; i < 2; ++i) {
    scaler_update(r.state, five, true);
    scaler_update(fresh, five, true);
  }
  CHECK(r.state.scale == s.scale);
  CHECK(fresh.scale == scaler_init(five).scale);
  // Overflows already absorbed stay used: 5 -> 2 with 3 absorbed (left 2) backs off at the next one.
  const ScalerState used = [&] {
    ScalerState t = scaler_init(five);
    for (int i = 0; i < 3; ++i) scaler_update(t, five, true);
    return t;
  }();
  REQUIRE(used.hysteresis_left == 2);
  ScalerParams two = five;
  two.hysteresis = 2;
  r = scaler_resume(used, "dynamic", two, 3, 4, 1, &error, 5);
  REQUIRE(error.empty());
  CHECK(r.state.hysteresis_left == -1);
  // Unknown (an older checkpoint): only the clamp to at most the new hysteresis.
  r = scaler_resume(s, "dynamic", five, 300, 4, 1, &error);
  CHECK(r.state.hysteresis_left == 1);
}

TEST_CASE("scaler resume: fields the state machine cannot produce are refused, naming the field", "[scaler]") {
  const ScalerParams p = dynamic(100);
  const ScalerState good = run_scaler(p, 50, 7);
  struct Bad {
    const char* field;
    void (*spoil)(ScalerState&);
  };
  const Bad cases[] = {
      {"growth_tracker", [](ScalerState& s) { s.growth_tracker = INT32_MAX - 4; }},  // the hostile round's UBSan crash
      {"growth_tracker", [](ScalerState& s) { s.growth_tracker = -1; }},
      {"scale", [](ScalerState& s) { s.scale = std::numeric_limits<float>::quiet_NaN(); }},
      {"scale", [](ScalerState& s) { s.scale = 0.0f; }},
      {"iterations", [](ScalerState& s) { s.iterations = 51; }},
      {"does not fit step", [](ScalerState& s) { s.overflow_steps += 1; }},
      {"hysteresis_left", [](ScalerState& s) { s.hysteresis_left = INT32_MIN; }},
      {"overflow_at_min", [](ScalerState& s) { s.overflow_at_min = INT32_MAX; }},
      {"last_overflow_iteration", [](ScalerState& s) { s.last_overflow_iteration = 1000; }},
      {"last_overflow_tensor", [](ScalerState& s) { s.last_overflow_tensor = 99; }},
      {"last_overflow_rank", [](ScalerState& s) { s.last_overflow_rank = 7; }},
      {"last_overflow_rank_tensor", [](ScalerState& s) { s.last_overflow_rank_tensor = -3; }},
  };
  std::string error;
  scaler_resume(good, "dynamic", p, 50, 4, 2, &error);
  REQUIRE(error.empty());
  for (const Bad& b : cases) {
    ScalerState s = good;
    b.spoil(s);
    scaler_resume(s, "dynamic", p, 50, 4, 2, &error);
    INFO(b.field << ": " << error);
    CHECK_THAT(error, Catch::Contains(b.field));
  }
}
