// A run's identity and the folders it owns. Every run has a run id (16 hex digits), made when it
// starts fresh and carried by a resume (from the checkpoint it continues); it is recorded in
// out_dir/run.json, in every checkpoint's header, in metrics.jsonl's start records and in
// summary.json. A run folder (run.out_dir) and a checkpoint folder (checkpoint.dir) hold one run
// at a time: before a run writes anything, whatever they hold of another run (its metrics,
// summary, config, plot and run.json; its checkpoints and roll-backs, each checkpoint by the id in
// its header) is moved to <folder>/previous/<that run's id>/, never deleted, never mixed in. So a
// fresh run in a used folder keeps the old run apart (and a rerun of the same command just
// works), checkpoint rotation and resume=auto see this run's checkpoints only, and a checkpoint
// folder another run points at is locked by whichever uses it (run_dir.h).
#pragma once

#include <string>
#include <vector>

namespace amp {

// A new run id: 16 hex digits from the system's random source and the time.
std::string new_run_id();

// The run id recorded in out_dir/run.json ("" when there is none, or it cannot be read).
std::string recorded_run_id(const std::string& out_dir);

// Rank 0, before this run writes its output: moves what out_dir and ckpt_dir hold of runs other
// than `run_id` to <dir>/previous/<id>/ (a run without an id: "earlier-<time>"). `adopt_legacy`:
// files without any id (written before runs had identities) belong to this run (a resume of
// such a checkpoint). Returns one line per move, for the log. A checkpoint.dir outside out_dir
// holding checkpoints of a run other than out_dir's is that other run's folder: Error(Config),
// naming it and the ways out. `fresh` (a run that resumed nothing): files named like checkpoints
// whose header cannot be read go too, with the folder owner's files (the run would write its own
// checkpoints over them). Throws Error(Output) when a move fails (the new run must not write
// beside the old one).
std::vector<std::string> keep_runs_apart(const std::string& out_dir, const std::string& ckpt_dir,
                                         const std::string& run_id, bool adopt_legacy, bool fresh);

// Writes out_dir/run.json ({"run_id", "created"}) atomically.
void write_run_json(const std::string& out_dir, const std::string& run_id);

}  // namespace amp
