// Collective watchdog (distributed.timeout_s, as c10d's and NCCL's timeouts). Every wait on other
// ranks (a collective, or a device stream holding NCCL collectives) is marked with a Wait scope;
// a thread checks the open scopes. When one has been open for longer than the timeout, this rank
// asks every other rank what it is doing over a side channel that needs no progress of the
// stuck collective, waits a few seconds for the answers, prints which collective and step it is
// stuck in and which ranks it is waiting for (no answer: stopped, hung or dead; or the answers of
// ranks waiting elsewhere), and ends the job with a non-zero code. When every rank answered and
// some are busy outside any collective (rank 0 writing a big checkpoint, generating a sample),
// the job is slow, not stuck: it says so and waits another timeout. The same thread answers other
// ranks' questions, so a rank that is alive but busy says what it is doing.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace amp {

// Point-to-point messages between the ranks' watchdog threads (a dedicated MPI communicator).
// Only the watchdog thread calls it.
class PeerChannel {
 public:
  virtual ~PeerChannel() = default;
  virtual void send(int to, int tag, const std::string& msg) = 0;  // non-blocking; never waits for `to`
  virtual bool poll(int* from, int* tag, std::string* msg) = 0;     // true when a message was received
};

class Watchdog {
 public:
  // on_fire(message, exit_code) reports and ends every rank of the job (in production it prints
  // the message and aborts; if it returns, the watchdog stops watching). timeout_s > 0.
  using OnFire = std::function<void(const std::string& message, int exit_code)>;
  Watchdog(int rank, int world, double timeout_s, std::unique_ptr<PeerChannel> channel, OnFire on_fire);
  ~Watchdog();  // stops and joins the thread
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void set_timeout(double timeout_s);
  double timeout() const;
  void set_step(int64_t step);  // the step later waits belong to (0: set-up)

  // What a wait is about, kept as plain values (formatted only when reported: opening and closing
  // a wait costs no allocation): "4.0 MiB f16 sum", "8 B u8 from rank 0", or a static note.
  struct Detail {
    size_t bytes = 0;
    const char* dtype = nullptr;  // static strings
    const char* op = nullptr;
    int root = -1;
    const char* note = nullptr;
  };

  // A wait on other ranks, open from construction to destruction; what: a static string
  // ("all-reduce"). A null watchdog makes it a no-op.
  class Wait {
   public:
    Wait(Watchdog* w, const char* what, const Detail& detail);
    Wait(Watchdog* w, const char* what) : Wait(w, what, Detail()) {}
    ~Wait();
    Wait(const Wait&) = delete;
    Wait& operator=(const Wait&) = delete;

   private:
    Watchdog* w_;
    uint64_t id_ = 0;
  };

  // This rank's state in words ("waiting in all-reduce (4.0 MiB f16) of step 12 for 3.1 s").
  std::string describe() const;

 private:
  struct Open {
    uint64_t id;
    const char* what;
    Detail detail;
    int64_t step;
    std::chrono::steady_clock::time_point since;    // when it opened (what answers report)
    std::chrono::steady_clock::time_point deadline_base;  // since, or when a busy peer re-armed it
  };
  static std::string describe(const Open& o);
  uint64_t open(const char* what, const Detail& detail);
  void close(uint64_t id);
  bool is_open(uint64_t id) const;  // mu_ held
  void loop();
  void answer(int from, int tag, const std::string& msg);
  // Asks the others and ends the job (true), or, when every rank answered and some are busy
  // outside any collective, re-arms the wait and returns false.
  bool fire(const Open& stuck, double seconds);

  const int rank_, world_;
  std::unique_ptr<PeerChannel> channel_;
  OnFire on_fire_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  double timeout_s_;
  int64_t step_ = 0;
  uint64_t next_id_ = 1;
  std::vector<Open> open_;  // oldest first; a handful at most (the caller's and the worker's)
  std::map<int, std::string> replies_;  // answers to this rank's question, by rank
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace amp
