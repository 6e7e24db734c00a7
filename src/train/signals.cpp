#include "train/signals.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <mutex>
#include <thread>

namespace amp {

namespace {

std::atomic<int> g_signal{0};
std::atomic<bool> g_armed{false};

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  return set;
}

// The one thread that receives the stop signals.
void receive() {
  const sigset_t set = stop_set();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (g_armed.load()) {
      g_signal.store(sig);
      continue;
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
