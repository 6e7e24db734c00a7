// SIGTERM / SIGUSR1 (what SLURM sends before preemption or the time limit) request a graceful
// stop: the trainer finishes the current step on every rank, writes a checkpoint and exits 0.
#pragma once

namespace amp {

void install_stop_signals();   // idempotent
int stop_signal();             // the signal received (0: none)
void raise_stop_signal(int sig);  // fault drills: behave as if `sig` arrived now
const char* signal_name(int sig);

}  // namespace amp
