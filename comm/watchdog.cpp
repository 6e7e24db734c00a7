#include "comm/watchdog.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace amp {

namespace {

constexpr int kQuery = 1, kReply = 2;
constexpr const char* kBusy = "busy";  // how an answer from a rank outside any collective begins
constexpr auto kTick = std::chrono::milliseconds(100);  // how often the thread looks
// How long a rank that fired waits for the others' answers before it ends the job.
double answer_window(double timeout_s) { return std::clamp(timeout_s / 4, 1.0, 5.0); }

// An answer "waiting in ... for N s" from a rank that has waited less than the timeout: it came to
// its collective recently (it was busy until then), so the job is moving.
bool recent_wait(const std::string& answer, double timeout_s) {
  const size_t at = answer.rfind(" for ");
  if (answer.rfind("waiting in ", 0) != 0 || at == std::string::npos) return false;
  char* end = nullptr;
  const double waited = std::strtod(answer.c_str() + at + 5, &end);
  return end && std::string(end) == " s" && waited < timeout_s;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string step_words(int64_t step) { return step > 0 ? strcat("step ", step) : std::string("set-up"); }

}  // namespace

Watchdog::Watchdog(int rank, int world, double timeout_s, std::unique_ptr<PeerChannel> channel, OnFire on_fire)
    : rank_(rank), world_(world), channel_(std::move(channel)), on_fire_(std::move(on_fire)), timeout_s_(timeout_s) {
  AMP_CHECK(timeout_s > 0, "watchdog timeout must be positive");
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::set_timeout(double timeout_s) {
  AMP_CHECK(timeout_s > 0, "watchdog timeout must be positive");
  std::lock_guard<std::mutex> lock(mu_);
  timeout_s_ = timeout_s;
}

double Watchdog::timeout() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timeout_s_;
}

void Watchdog::set_step(int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  step_ = step;
}

bool Watchdog::is_open(uint64_t id) const {
  for (const Open& o : open_)
    if (o.id == id) return true;
  return false;
}

uint64_t Watchdog::open(const char* what, const Detail& detail) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  const auto now = std::chrono::steady_clock::now();
  open_.push_back(Open{id, what, detail, step_, now, now});
  return id;
}

void Watchdog::close(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < open_.size(); ++i)
    if (open_[i].id == id) {
      open_.erase(open_.begin() + long(i));
      return;
    }
}

Watchdog::Wait::Wait(Watchdog* w, const char* what, const Detail& detail) : w_(w) {
  if (w_) id_ = w_->open(what, detail);
}

Watchdog::Wait::~Wait() {
  if (w_) w_->close(id_);
}

std::string Watchdog::describe(const Open& o) {
  const Detail& d = o.detail;
  std::string detail;
  if (d.dtype) {
    char b[48];
    const double bytes = double(d.bytes);
    if (bytes >= 1048576.0) std::snprintf(b, sizeof b, "%.1f MiB", bytes / 1048576.0);
    else if (bytes >= 1024.0) std::snprintf(b, sizeof b, "%.1f KiB", bytes / 1024.0);
    else std::snprintf(b, sizeof b, "%.0f B", bytes);
    detail = strcat(b, " ", d.dtype, d.op ? std::string(" ") + d.op : std::string(),
                    d.root >= 0 ? strcat(" from rank ", d.root) : std::string());
  }
  if (d.note) detail += (detail.empty() ? "" : ", ") + std::string(d.note);
  return strcat(o.what, detail.empty() ? "" : " (" + detail + ")", " of ", step_words(o.step));
}

std::string Watchdog::describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (open_.empty()) return strcat(kBusy, " with ", step_words(step_), " (in no collective)");
  const Open& o = open_.front();  // the oldest wait
  char waited[32];
  std::snprintf(waited, sizeof waited, "%.1f", seconds_since(o.since));
  return strcat("waiting in ", describe(o), " for ", waited, " s");
}

void Watchdog::answer(int from, int tag, const std::string& msg) {
  if (tag == kQuery) {
    channel_->send(from, kReply, describe());
  } else if (tag == kReply) {
    std::lock_guard<std::mutex> lock(mu_);
    replies_[from] = msg;
  }
}

void Watchdog::loop() {
  auto last_tick = std::chrono::steady_clock::now();
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, kTick, [&] { return stop_; })) return;
      // A tick far later than asked for means this whole process was frozen (SIGSTOP, a
      // suspended VM): that time was not spent waiting for the others, so it does not count.
      const auto now = std::chrono::steady_clock::now();
      const auto gap = now - last_tick;
      last_tick = now;
      if (gap > kTick * 10)
        for (Open& o : open_) {
          o.since += gap - kTick;
          o.deadline_base += gap - kTick;
        }
    }
    int from = 0, tag = 0;
    std::string msg;
    while (channel_->poll(&from, &tag, &msg)) answer(from, tag, msg);

    Open stuck{0, nullptr, {}, 0, {}, {}};
    double waited = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!open_.empty()) {
        const Open& o = open_.front();
        waited = seconds_since(o.deadline_base);
        if (waited > timeout_s_) stuck = o;
      }
    }
    if (stuck.what && fire(stuck, waited)) return;
  }
}

bool Watchdog::fire(const Open& stuck, double seconds) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    replies_.clear();  // this round's answers only
  }
  for (int r = 0; r < world_; ++r)
    if (r != rank_) channel_->send(r, kQuery, "");
  const double window = answer_window(timeout());
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    int from = 0, tag = 0;
    std::string msg;
    while (channel_->poll(&from, &tag, &msg)) answer(from, tag, msg);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (int(replies_.size()) >= world_ - 1) break;
      if (!is_open(stuck.id)) return false;  // it completed while we asked: nothing is stuck
    }
    if (seconds_since(t0) > window) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::string silent, others, busy;
  const double timeout_s = timeout();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!is_open(stuck.id)) return false;  // it completed while we asked (a silent peer may have exited since)
    for (int r = 0; r < world_; ++r) {
      if (r == rank_) continue;
      auto it = replies_.find(r);
      if (it == replies_.end()) silent += (silent.empty() ? "" : ", ") + std::to_string(r);
      else others += strcat("; rank ", r, ": ", it->second);
      if (it != replies_.end() && (it->second.rfind(kBusy, 0) == 0 || recent_wait(it->second, timeout_s)))
        busy += (busy.empty() ? "" : ", ") + std::to_string(r);
    }
  }
  // Every rank answered and some are busy outside any collective (rank 0 writing a checkpoint or
  // generating a sample) or have only just come to wait: they are coming, this is not a hang.
  // Wait another timeout, and say so.
  if (silent.empty() && !busy.empty()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (Open& o : open_)
        if (o.id == stuck.id) o.deadline_base = std::chrono::steady_clock::now();
    }
    std::fprintf(stderr, "[rank %d] watchdog note: %s has waited %d s (distributed.timeout_s = %g), but rank(s) %s "
                 "answered that they are busy outside any collective or have only just come to wait%s; waiting on\n",
                 rank_, describe(stuck).c_str(), int(seconds_since(stuck.since)), timeout_s, busy.c_str(), others.c_str());
    std::fflush(stderr);
    return false;
  }
  const std::string msg = strcat(
      "[rank ", rank_, "] watchdog error: ", describe(stuck), " made no progress for ", int(seconds),
      " s (distributed.timeout_s = ", timeout(), ")",
      silent.empty() ? std::string("; every rank answered")
                     : strcat("; waiting for rank(s) ", silent, ", which did not answer within ", window,
                              " s (stopped, hung or dead)"),
      others, ". Ending the job.");
  on_fire_(msg, int(ErrorKind::Comm));
  return true;
}

}  // namespace amp
