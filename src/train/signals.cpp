#include "train/signals.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <thread>

namespace amp {

namespace {

std::atomic<int> g_signal{0};
std::atomic<bool> g_armed{false};
std::atomic<bool> g_announce{true};  // this process prints what a signal does (rank 0, or no MPI yet)

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGINT);
  return set;
}

// The one thread that receives the stop signals.
void receive() {
  const sigset_t set = stop_set();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (g_armed.load()) {
      int pending = 0;
      if (g_signal.compare_exchange_strong(pending, sig)) {
        // The first: every rank finishes its step, a checkpoint is written, all exit 0.
        if (g_announce.load())
          std::fprintf(stderr, "\n%s: finishing this step, writing a checkpoint and stopping (send it again, or press "
                               "Ctrl-C again, to stop at once without a checkpoint)\n", signal_name(sig));
        continue;
      }
      // A second one while the stop is under way: stop now, as Ctrl-C twice does elsewhere.
      std::fprintf(stderr, "\n%s again: stopping at once, without a checkpoint (the last one written stays)\n",
                   signal_name(sig));
      std::fflush(stderr);
      ::_exit(128 + sig);
    }
    // Not armed: the default effect (the process ends), delivered to this thread alone.
    std::signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
    ::raise(sig);
    ::_exit(128 + sig);  // not reached
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
  g_armed.store(true);
}

int stop_signal() { return g_signal.load(); }

void announce_stop_signals(bool on) { g_announce.store(on); }

void raise_stop_signal(int sig) {
  if (g_armed.load()) g_signal.store(sig);
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
