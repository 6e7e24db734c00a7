// The collective watchdog: fires only when a wait outlives the timeout, names the silent ranks and
// reports what the answering ones are doing. Ranks are simulated in one process over an in-memory
// side channel; a "stopped" rank has no watchdog, so it never answers.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <thread>

#include "comm/watchdog.h"

using amp::PeerChannel;
using amp::Watchdog;
using Catch::Contains;

namespace {

struct Net {
  struct Msg {
    int from, tag;
    std::string text;
  };
  std::mutex mu;
  std::vector<std::deque<Msg>> inbox;
  explicit Net(int n) : inbox(size_t(n)) {}
};

class FakeChannel final : public PeerChannel {
 public:
  FakeChannel(Net& net, int rank) : net_(net), rank_(rank) {}
  void send(int to, int tag, const std::string& msg) override {
    std::lock_guard<std::mutex> lock(net_.mu);
    net_.inbox[size_t(to)].push_back({rank_, tag, msg});
  }
  bool poll(int* from, int* tag, std::string* msg) override {
    std::lock_guard<std::mutex> lock(net_.mu);
    auto& q = net_.inbox[size_t(rank_)];
    if (q.empty()) return false;
    *from = q.front().from;
    *tag = q.front().tag;
    *msg = q.front().text;
    q.pop_front();
    return true;
  }

 private:
  Net& net_;
  int rank_;
};

struct Fired {
  std::mutex mu;
  std::string message;
  int code = 0;
  std::atomic<bool> done{false};
};

std::unique_ptr<Watchdog> make(Net& net, int rank, int world, double timeout, Fired& f) {
  return std::make_unique<Watchdog>(rank, world, timeout, std::make_unique<FakeChannel>(net, rank),
                                    [&f](const std::string& m, int code) {
                                      std::lock_guard<std::mutex> lock(f.mu);
                                      f.message = m;
                                      f.code = code;
                                      f.done = true;
                                    });
}

bool wait_for(const std::atomic<bool>& flag, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  while (!flag && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return flag;
}

}  // namespace

TEST_CASE("watchdog: a stuck collective names the silent rank and what the others do", "[watchdog]") {
  Net net(4);
  Fired f0, f2, f3;
  auto w0 = make(net, 0, 4, 0.3, f0);
  auto w2 = make(net, 2, 4, 0.3, f2);
  auto w3 = make(net, 3, 4, 30.0, f3);  // rank 3 is alive but busy, not in a collective
  // rank 1 is stopped: no watchdog answers for it
  w0->set_step(7);
  w2->set_step(7);
  w3->set_step(7);
  const Watchdog::Detail sum{size_t(4) << 20, "f16", "sum", -1, nullptr};
  Watchdog::Wait a(w0.get(), "all-reduce", sum);
  Watchdog::Wait b(w2.get(), "all-reduce", sum);
  REQUIRE(wait_for(f0.done, 10));
  REQUIRE(wait_for(f2.done, 10));
  CHECK_FALSE(f3.done);
  std::lock_guard<std::mutex> lock(f0.mu);
  INFO(f0.message);
  CHECK(f0.code == 6);
  CHECK_THAT(f0.message, Contains("[rank 0] watchdog error: all-reduce (4.0 MiB f16 sum) of step 7"));
  CHECK_THAT(f0.message, Contains("waiting for rank(s) 1,"));
  CHECK_THAT(f0.message, Contains("rank 2: waiting in all-reduce (4.0 MiB f16 sum) of step 7"));
  CHECK_THAT(f0.message, Contains("rank 3: busy with step 7 (in no collective)"));
  CHECK_THAT(f2.message, Contains("[rank 2] watchdog error"));
}

TEST_CASE("watchdog: waits that end in time never fire", "[watchdog]") {
  Net net(2);
  Fired f0, f1;
  auto w0 = make(net, 0, 2, 0.5, f0);
  auto w1 = make(net, 1, 2, 0.5, f1);
  for (int step = 1; step <= 8; ++step) {
    w0->set_step(step);
    Watchdog::Wait a(w0.get(), "all-reduce");
    std::this_thread::sleep_for(std::chrono::milliseconds(150));  // each wait shorter than the timeout
  }
  CHECK_FALSE(f0.done);
  CHECK_FALSE(f1.done);
  CHECK_THAT(w0->describe(), Contains("busy with step 8"));
  Watchdog::Wait none(nullptr, "all-reduce");  // a null watchdog: a no-op scope
}

TEST_CASE("watchdog: set-up waits are named as such and the timeout can change", "[watchdog]") {
  Net net(2);
  Fired f0;
  auto w0 = make(net, 0, 2, 100.0, f0);
  Watchdog::Wait a(w0.get(), "broadcast", Watchdog::Detail{8, "u8", nullptr, 0, nullptr});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK_FALSE(f0.done);
  w0->set_timeout(0.2);
  REQUIRE(wait_for(f0.done, 10));
  std::lock_guard<std::mutex> lock(f0.mu);
  CHECK_THAT(f0.message, Contains("broadcast (8 B u8 from rank 0) of set-up made no progress"));
  CHECK_THAT(f0.message, Contains("waiting for rank(s) 1,"));
}

TEST_CASE("watchdog: a rank busy outside any collective is slow, not stuck, a deadlock still fires", "[watchdog]") {
  // Rank 0 waits in an all-reduce while rank 1 writes a big checkpoint (busy, in no collective):
  // the wait outlasts the timeout several times without ending the job (the hostile round's
  // exit 6 on a healthy run). Once rank 1 stops answering (it died), rank 0 fires.
  Net net(2);
  Fired f0, f1;
  auto w0 = make(net, 0, 2, 0.3, f0);
  auto w1 = make(net, 1, 2, 0.3, f1);
  w0->set_step(5);
  w1->set_step(5);
  {
    Watchdog::Wait a(w0.get(), "all-reduce");
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // 5 timeouts
    CHECK_FALSE(f0.done);
    w1.reset();  // rank 1 is gone: no answer any more
    REQUIRE(wait_for(f0.done, 10));
  }
  {
    std::lock_guard<std::mutex> lock(f0.mu);
    CHECK_THAT(f0.message, Contains("waiting for rank(s) 1,"));
  }
  // Both ranks waiting in collectives (they disagree on which: a deadlock): fired as before.
  Net net2(2);
  Fired g0, g1;
  auto v0 = make(net2, 0, 2, 0.3, g0);
  auto v1 = make(net2, 1, 2, 0.3, g1);
  Watchdog::Wait c(v0.get(), "all-reduce");
  Watchdog::Wait d(v1.get(), "broadcast");
  REQUIRE(wait_for(g0.done, 10));
  std::lock_guard<std::mutex> lock(g0.mu);
  CHECK_THAT(g0.message, Contains("every rank answered") && Contains("rank 1: waiting in broadcast"));
}
