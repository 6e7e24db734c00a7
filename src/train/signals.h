// SIGTERM / SIGUSR1 (what SLURM sends before preemption or the time limit) and SIGINT (Ctrl-C)
// request a graceful stop: the trainer finishes the current step on every rank, writes a
// checkpoint and exits 0. A second stop signal while that is under way stops at once (exit
// 128 + signal, no checkpoint), as a second Ctrl-C does in torchrun.
//
// No signal handler runs in the middle of library code: main() blocks both signals in every thread
// before any other thread exists (MPI, PMIx, OpenMP and the trainer's own inherit the mask), and
// one thread receives them with sigwait(). A signal that arrives during set-up (MPI start-up,
// loading data) is kept: an armed trainer stops before its first step (exit 0, nothing lost); one
// whose config turns the graceful stop off (checkpoint.on_signal false) disarms, and a kept signal
// then has its default effect (the process ends), as it would without this file.
#pragma once

namespace amp {

void block_stop_signals();     // first thing in main(): blocks them here and starts the receiver
void install_stop_signals();   // arm the graceful stop (idempotent)
void disarm_stop_signals();    // the default effect from now on (a signal kept from set-up: now)
int stop_signal();             // the signal received (0: none)
void announce_stop_signals(bool on);  // whether this process prints what a signal does (rank 0 only)
void raise_stop_signal(int sig);  // fault drills: behave as if `sig` arrived now
const char* signal_name(int sig);

}  // namespace amp
