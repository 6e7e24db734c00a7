// ZeRO stage 2's pieces on one process: the CPU backend returns whole pages (protected until
// committed again, as a device's unmapped pages), and the count of the gradient window in the
// training-state bytes.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/page_ledger.h"
#include "optim/state_bytes.h"

using namespace amp;

namespace {

// Whether a one-byte write at p kills a child process with SIGSEGV (the page is protected). The
// child restores the default action first (a sanitizer's handler would report and exit instead).
bool write_faults(unsigned char* p) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::signal(SIGSEGV, SIG_DFL);
    *static_cast<volatile unsigned char*>(p) = 1;
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
}

}  // namespace

TEST_CASE("cpu memory: release returns the whole pages inside a range and protects them until commit brings them "
          "back zero-filled", "[zero2]") {
  CpuBackend be(1);
  DeviceMemory& mem = be.memory();
  const size_t page = mem.release_granularity();
  REQUIRE(page >= 4096);  // CpuBackend: transparent huge pages
  REQUIRE(page == kReleasePageBytes);
  Buffer b = mem.alloc_releasable(64 * page);
  unsigned char* p = b.as<unsigned char>();
  CHECK(reinterpret_cast<uintptr_t>(p) % page == 0);
  CHECK(mem.resident_bytes(p, 64 * page) == 0);  // nothing touched yet
  CHECK(p[12345] == 0);                            // zero-filled
  auto pattern = [](size_t i) { return static_cast<unsigned char>(i % 251 + 1); };
  for (size_t i = 0; i < 64 * page; ++i) p[i] = pattern(i);
  const size_t before = mem.resident_bytes(p, 64 * page);
  CHECK(before == 64 * page);
  CHECK_FALSE(write_faults(p + 20 * page));  // the probe itself: an ordinary page takes the write
  // From the middle of a page to the middle of another: only the 19 whole pages between them go.
  const size_t lo = 10 * page + 100, hi = 30 * page + 7;
  mem.release(p + lo, hi - lo);
  CHECK(before - mem.resident_bytes(p, 64 * page) == 19 * page);
  CHECK(write_faults(p + 11 * page));
  CHECK(write_faults(p + 20 * page + 17));
  CHECK(write_faults(p + 30 * page - 1));
  CHECK_FALSE(write_faults(p + 11 * page - 1));  // the partial pages at the ends stay
  CHECK_FALSE(write_faults(p + 30 * page));
  // Three bytes inside page 11 bring back that page alone.
  mem.commit(p + 11 * page + 5, 3);
  CHECK_FALSE(write_faults(p + 11 * page));
  CHECK(write_faults(p + 12 * page));
  // The rest, with a range starting and ending inside pages that were never released.
  mem.commit(p + 5 * page + 3, 30 * page);
  size_t changed = 0, nonzero = 0;
  for (size_t i = 0; i < 64 * page; ++i) {
    const bool inside = i >= 11 * page && i < 30 * page;
    if (inside) nonzero += p[i] != 0;
    else changed += p[i] != pattern(i);
  }
  CHECK(nonzero == 0);  // released pages come back zero-filled
  CHECK(changed == 0);  // the others as they were
  std::memset(p + 11 * page, 7, 19 * page);  // written again: resident again
  CHECK(mem.resident_bytes(p, 64 * page) == before);
  mem.release(p + 5, page - 10);  // no whole page inside: nothing happens
  CHECK(p[5] == pattern(5));
  CHECK_FALSE(write_faults(p + 5));
}

TEST_CASE("stage 2: the gradient window is the two largest tensors, three buckets and four pages, at most the buffer",
          "[zero2]") {
  const std::vector<TensorSpan> spans = {{0, 10}, {32, 500}, {544, 300}, {864, 20}};
  CHECK(stage2_window(spans, 1000, 40, 5) == 500 + 300 + 120 + 20);
  CHECK(stage2_window(spans, 1000, 100, 5) == 1000);
  CHECK(stage2_window(spans, 1000, 10, 300) == 1000);  // the pages alone cover the buffer
  // A GPT-like layout in the model's scale: 100 tensors of 5M elements, bf16, buckets of 25 MiB.
  std::vector<TensorSpan> big;
  for (size_t t = 0; t < 100; ++t) big.push_back({t * 5'000'000, 5'000'000});
  const size_t flat = 500'000'000, bucket = size_t(25) << 20;
  OptimizerParams adam;
  adam.kind = OptimizerKind::AdamW;
  for (int zero : {1, 2}) {
    const StateShape s = estimated_state_shape(flat, DType::BF16, adam, 8, zero, false, 32, big, bucket);
    const StateBytes b = state_bytes(s);
    CHECK(s.released == (zero == 2));
    // 16-bit gradients (the window with zero 2), the reduced 16-bit shard, the FP32 unscale chunk
    // (a bucket's bytes in FP32).
    const size_t window = zero == 2 ? 2 * 5'000'000 + 3 * (bucket / 2) + 4 * (kReleasePageBytes / 2) : s.flat;
    CHECK(b.gradients == window * 2 + s.held * 2 + (bucket / 4) * 4);
  }
  // One rank: nothing is sharded or returned.
  const StateShape one = estimated_state_shape(1000, DType::BF16, adam, 1, 2, false, 32, spans, 80);
  CHECK((!one.sharded && !one.released));
}

namespace {

// The ledger's driver on the host: which pages are backed, which markers have passed, what was
// zeroed; it fails the test on a map of a mapped page or an unmap of an unmapped one.
struct FakeDriver : PageLedger::Driver {
  explicit FakeDriver(size_t pages) : backed(pages, true) {}
  void map(size_t page) override {
    CHECK_FALSE(backed[page]);
    backed[page] = true;
    ++maps;
  }
  void unmap(size_t page) override {
    CHECK(backed[page]);
    CHECK(last_answer);  // only ever after a marker was found passed (inside reap())
    backed[page] = false;
  }
  void zero(size_t first, size_t count) override { zeroed.emplace_back(first, count); }
  uint64_t mark() override { return ++markers; }
  bool passed(uint64_t marker) override {
    last_answer = marker <= done;
    return last_answer;
  }
  void forget(uint64_t marker) override { forgotten.push_back(marker); }
  size_t backed_count() const {
    size_t n = 0;
    for (bool b : backed) n += b;
    return n;
  }
  std::vector<bool> backed;
  uint64_t markers = 0, done = 0;  // markers <= done have passed
  bool last_answer = false;        // what passed() said last
  size_t maps = 0;
  std::vector<std::pair<size_t, size_t>> zeroed;
  std::vector<uint64_t> forgotten;
};

}  // namespace

TEST_CASE("page ledger: a released page goes only once its marker has passed, comes back zeroed, and a later "
          "release of the same page is not undone by an earlier marker", "[zero2]") {
  FakeDriver d(10);
  PageLedger L(10, d);
  CHECK(L.held(0, 10) == 10);
  L.release(2, 6);  // marker 1, still running
  CHECK(d.backed_count() == 10);
  CHECK(L.held(0, 10) == 10);  // pending pages still hold memory
  d.done = 1;
  L.reap();
  CHECK(d.backed_count() == 6);
  CHECK((!d.backed[2] && !d.backed[5] && d.backed[1] && d.backed[6]));
  CHECK(L.held(0, 10) == 6);
  CHECK(d.forgotten == std::vector<uint64_t>{1});
  // Commit a range reaching past the returned pages: 3 and 4 mapped anew and zeroed in one run.
  L.commit(3, 5);
  CHECK(d.maps == 2);
  CHECK(d.zeroed == std::vector<std::pair<size_t, size_t>>{{3, 2}});
  CHECK(L.held(0, 10) == 8);
  // Committed while pending: never unmapped, zeroed (after the work before its release).
  d.zeroed.clear();
  L.release(7, 9);  // marker 2
  L.commit(8, 10);  // 8 pending -> mapped; 9 was never released
  CHECK(d.zeroed == std::vector<std::pair<size_t, size_t>>{{8, 1}});
  d.done = 2;
  L.reap();
  CHECK((!d.backed[7] && d.backed[8] && d.backed[9]));
  CHECK(d.maps == 2);
  // Released, committed and released again before the first marker passes: the first marker must
  // not return the page, the second does.
  L.release(0, 2);  // marker 3
  L.commit(0, 2);
  L.release(0, 2);  // marker 4
  d.done = 3;
  L.reap();
  CHECK((d.backed[0] && d.backed[1]));
  d.done = 4;
  L.reap();
  CHECK((!d.backed[0] && !d.backed[1]));
  CHECK(d.forgotten == std::vector<uint64_t>{1, 2, 3, 4});
  // Markers pass in order: a later one is not asked about while an earlier one runs.
  L.release(3, 4);  // marker 5
  L.release(4, 5);  // marker 6
  d.done = 5;
  L.reap();
  CHECK((!d.backed[3] && d.backed[4]));
  // settle(): after the owner waited for the device, pending pages count as mapped, markers forgotten.
  L.settle();
  CHECK(d.forgotten == std::vector<uint64_t>{1, 2, 3, 4, 5, 6});
  CHECK(L.mapped(4));
  CHECK(L.held(0, 10) == size_t(d.backed_count()));
  // Out-of-range pages are an internal error.
  CHECK_THROWS(L.release(9, 11));
  CHECK_THROWS(L.commit(5, 4));
}

TEST_CASE("optimizer passes: the backend's pass size within the unscale chunk, the whole chunk for 0", "[optimizer]") {
  CHECK(unscale_pass(6553600, 0) == 6553600);      // CUDA: one pass per chunk
  CHECK(unscale_pass(6553600, 65536) == 65536);    // CPU, 1 thread
  CHECK(unscale_pass(1000, 131072) == 1000);       // a chunk smaller than the pass (few parameters)
  CHECK(unscale_pass(0, 0) == 1);                  // never a pass of 0 elements
}
