#include "train/signals.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace amp {

namespace {

std::atomic<int> g_signal{0};
enum State : int { kSettingUp = 0, kArmed = 1, kDisarmed = 2 };
std::atomic<int> g_state{kSettingUp};
std::atomic<bool> g_announce{true};  // this process prints what a signal does (rank 0, or no MPI yet)

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGINT);
  return set;
}

// The default effect of sig (the process ends), delivered to this thread alone.
[[noreturn]] void die_of(int sig) {
  std::signal(sig, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  ::raise(sig);
  ::_exit(128 + sig);  // not reached
}

// During set-up rank 0 is not known yet: the launcher's rank variable says whether to print.
bool first_rank_by_environment() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* r = std::getenv(v)) return std::string(r) == "0";
  return true;
}

// The one thread that receives the stop signals.
void receive() {
  const sigset_t set = stop_set();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    const int state = g_state.load();
    if (state == kSettingUp) {
      int pending = 0;
      if (g_signal.compare_exchange_strong(pending, sig)) {
        if (first_rank_by_environment())
          std::fprintf(stderr, "\n%s during set-up: stopping before the first step (send it again, or press Ctrl-C "
                               "again, to stop at once)\n", signal_name(sig));
        continue;
      }
      std::fprintf(stderr, "\n%s again: stopping at once\n", signal_name(sig));
      std::fflush(stderr);
      ::_exit(128 + sig);
    }
    if (state == kArmed) {
      int pending = 0;
      if (g_signal.compare_exchange_strong(pending, sig)) {
        // The first: every rank finishes its step, a checkpoint is written, all exit 0. The checkpoint
        // needs every rank: when a launcher sends this because another rank died, it never comes,
        // so the line promises it only on that condition (the line that it was written follows).
        if (g_announce.load())
          std::fprintf(stderr, "\n%s: finishing this step, then stopping with a checkpoint if every rank gets there "
                               "(send it again, or press Ctrl-C again, to stop at once without one)\n", signal_name(sig));
        continue;
      }
      // A second one while the stop is under way: stop now, as Ctrl-C twice does elsewhere.
      std::fprintf(stderr, "\n%s again: stopping at once, without a checkpoint (the last one written stays)\n",
                   signal_name(sig));
      std::fflush(stderr);
      ::_exit(128 + sig);
    }
    die_of(sig);  // disarmed: the default effect
  }
}

}  // namespace

void block_stop_signals() {
  static std::once_flag once;
  std::call_once(once, [] {
    const sigset_t set = stop_set();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::thread(receive).detach();
  });
}

void install_stop_signals() {
  block_stop_signals();  // for programs (tests) whose main() did not
  g_state.store(kArmed);
}

void disarm_stop_signals() {
  g_state.store(kDisarmed);
  // A signal kept from set-up now has the effect it would have had (sigwait's thread is not this
  // one, so raise it for the process).
  if (const int sig = g_signal.exchange(0); sig != 0) ::kill(::getpid(), sig);
}

int stop_signal() { return g_signal.load(); }

void announce_stop_signals(bool on) { g_announce.store(on); }

void raise_stop_signal(int sig) {
  if (g_state.load() == kArmed) g_signal.store(sig);
  else ::kill(::getpid(), sig);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGINT: return "SIGINT";
    default: return "a signal";
  }
}

}  // namespace amp
