#include "train/run_identity.h"

#include <fcntl.h>
#include <stdio.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "train/checkpoint.h"

namespace amp {

namespace fs = std::filesystem;

namespace {

// The files of a run folder that belong to its run (not the lock, not the checkpoint folder,
// which is handled checkpoint by checkpoint).
const char* const kRunFiles[] = {"metrics.jsonl", "summary.json", "config.yaml", "plot.png", "run.json"};

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char b[32];
  std::strftime(b, sizeof b, "%Y%m%dT%H%M%SZ", std::gmtime(&t));
  return b;
}

// previous/<id>/ in dir, unused (a suffix when a run of that id was moved there before).
fs::path destination(const fs::path& dir, const std::string& id) {
  const std::string name = id.empty() ? "earlier-" + utc_now() : id;
  fs::path to = dir / "previous" / name;
  for (int k = 2; fs::exists(to); ++k) to = dir / "previous" / strcat(name, "-", k);
  return to;
}

// Moves without ever replacing what is at `to` (renameat2's RENAME_NOREPLACE where the file system
// has it, else a check first: the destination folders are fresh, so nothing races for them).
void move(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::create_directories(to.parent_path(), ec);
  int err = 0;
  if (ec) {
    err = ec.value();
  } else if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) != 0) {
    err = errno;
    if (err == EINVAL || err == ENOSYS) {
      err = fs::exists(fs::symlink_status(to, ec)) ? EEXIST : (::rename(from.c_str(), to.c_str()) == 0 ? 0 : errno);
    }
  }
  if (err)
    throw Error(ErrorKind::Output, strcat("output error: cannot move ", from.string(), " (another run's) to ",
                                          to.string(), ": ", std::strerror(err), "; move or remove it, or use another folder"));
}

// The run id a JSON file of a run folder names ("" when none, or not a valid one). A path that is
// not a regular file (a FIFO would block the read) is refused naming it.
std::string json_run_id(const fs::path& file) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(file, ec))) return "";
  if (const std::string problem = regular_file_problem(file.string()); !problem.empty())
    throw Error(ErrorKind::Config, strcat("config error: run.out_dir: ", file.string(), ": ", problem,
                                          "; a run folder's ", file.filename().string(),
                                          " is a file this program writes: move that away or use another folder"));
  std::ifstream in(file);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  const std::string id =
      j.is_object() && j.contains("run_id") && j["run_id"].is_string() ? j["run_id"].get<std::string>() : "";
  return valid_run_id(id) ? id : "";
}

}  // namespace

std::string new_run_id() {
  std::random_device rd;
  const uint64_t t = uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
  const uint64_t v = (uint64_t(rd()) << 32 ^ uint64_t(rd())) ^ (t * 0x9E3779B97F4A7C15ull);
  char b[20];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

std::string recorded_run_id(const std::string& out_dir) { return json_run_id(fs::path(out_dir) / "run.json"); }

std::vector<std::string> keep_runs_apart(const std::string& out_dir, const std::string& ckpt_dir,
                                         const std::string& run_id, bool adopt_legacy, bool fresh) {
  std::vector<std::string> log;
  std::error_code ec;
  // Where another run's files go: out_dir/previous/<id>/, mirroring the run folder (its
  // checkpoints under checkpoints/ when checkpoint.dir lies in out_dir, else under
  // <checkpoint.dir>/previous/<id>/). One folder per run moved.
  const fs::path out(out_dir), ck(ckpt_dir);
  const fs::path out_canon = fs::weakly_canonical(out, ec), ck_canon = fs::weakly_canonical(ck, ec);
  const std::string rel = ck_canon.lexically_relative(out_canon).string();
  const bool ck_inside = !rel.empty() && rel.rfind("..", 0) != 0;  // "." too: checkpoint.dir == run.out_dir
  std::map<std::string, fs::path> run_home;  // id -> previous/<id> of out_dir
  auto home = [&](const std::string& id) -> const fs::path& {
    auto it = run_home.find(id);
    if (it == run_home.end()) it = run_home.emplace(id, destination(out, id)).first;
    return it->second;
  };
  std::map<std::string, fs::path> ckpt_homes;  // id -> where its checkpoints go
  auto ckpt_home = [&](const std::string& id) -> const fs::path& {
    auto it = ckpt_homes.find(id);
    if (it == ckpt_homes.end()) it = ckpt_homes.emplace(id, ck_inside ? home(id) / fs::path(rel) : destination(ck, id)).first;
    return it->second;
  };
  auto who = [](const std::string& id) { return id.empty() ? std::string("an earlier run") : "run " + id; };

  // A checkpoint folder apart from the run folder that is itself a run folder (run.json) belongs to
  // that run: checkpoints written there would mix with its files.
  if (!ck_inside && ck_canon != out_canon && fs::exists(fs::symlink_status(ck / "run.json", ec)))
    throw Error(ErrorKind::Config,
                strcat("config error: checkpoint.dir: ", ckpt_dir, " is the run folder of ",
                       who(recorded_run_id(ckpt_dir)), " (it holds run.json); give this run's checkpoints a folder of "
                       "their own (the default: run.out_dir/checkpoints)"));
  // The checkpoints' ids, from their headers. A file whose header cannot be read is nobody's: a
  // resumed run leaves it where it is (a checkpoint of its own cut short, say); a fresh run moves
  // it below, or it would write its own checkpoint of that step over it.
  std::map<std::string, std::vector<fs::path>> by_id;
  std::vector<fs::path> unreadable;
  for (const std::string& p : list_checkpoints(ckpt_dir)) {
    const CheckpointIdentity c = checkpoint_identity(p);
    if (c.readable) by_id[c.run_id].push_back(p);
    else unreadable.push_back(p);
  }
  // The run folder's files belong to the run its run.json names; without a readable one (written
  // before ids, or damaged), to the run summary.json names, else to the one run the checkpoints in
  // it name, so that an old run's files and checkpoints go to one folder.
  std::string owner = recorded_run_id(out_dir);
  if (owner.empty()) owner = json_run_id(out / "summary.json");
  if (owner.empty() && ck_inside && by_id.size() == 1 && valid_run_id(by_id.begin()->first))
    owner = by_id.begin()->first;
  const bool owner_is_us = owner == run_id || (owner.empty() && adopt_legacy);
  if (!owner_is_us) {
    std::string names;
    for (const char* f : kRunFiles) {
      const fs::path p = out / f;
      if (!fs::exists(fs::symlink_status(p, ec))) continue;
      move(p, home(owner) / f);
      names += (names.empty() ? "" : ", ") + std::string(f);
    }
    if (!names.empty())
      log.push_back(strcat("run.out_dir ", out_dir, " held ", who(owner), ": moved its ", names, " to ",
                           home(owner).string(), "/ (nothing is deleted)"));
    // Roll-backs (abandoned/) of the checkpoint folder were made by the line that owned the folder.
    const fs::path abandoned = ck / "abandoned";
    if (fs::is_directory(abandoned, ec)) {
      const fs::path to = ckpt_home(owner) / "abandoned";
      move(abandoned, to);
      log.push_back(strcat("moved the roll-backs of ", who(owner), " to ", to.string(), "/"));
    }
  }
  // Checkpoints, each by the id in its own header (an id that is not one names no folder).
  for (const auto& [header_id, paths] : by_id) {
    if (header_id == run_id || (header_id.empty() && adopt_legacy)) continue;
    const std::string id = valid_run_id(header_id) ? header_id : "";
    // A checkpoint folder outside this run folder that holds another run's checkpoints is that
    // run's (its own run folder may continue it): not ours to clear.
    if (!ck_inside && id != owner)
      throw Error(ErrorKind::Config,
                  strcat("config error: checkpoint.dir: ", ckpt_dir, " holds ", paths.size(), " checkpoint(s) of ", who(id),
                         ", which this run (", run_id, ") would mix with its own; give this run its own checkpoint.dir "
                         "(the default: run.out_dir/checkpoints), or continue that run with checkpoint.resume=auto "
                         "and its run.out_dir"));
    const fs::path to = ckpt_home(id);
    for (const fs::path& p : paths) move(p, to / p.filename());
    log.push_back(strcat("checkpoint.dir ", ckpt_dir, " held ", paths.size(), " checkpoint(s) of ", who(id), ": moved to ",
                         to.string(), "/ (nothing is deleted)"));
  }
  if (fresh && !unreadable.empty()) {
    const fs::path to = ckpt_home(owner);  // a fresh run owns nothing here yet
    for (const fs::path& p : unreadable) move(p, to / p.filename());
    log.push_back(strcat("checkpoint.dir ", ckpt_dir, " held ", unreadable.size(), " file(s) named like checkpoints whose ",
                         "header cannot be read (a checkpoint cut short, or not one): moved to ", to.string(),
                         "/ (nothing is deleted)"));
  }
  return log;
}

void write_run_json(const std::string& out_dir, const std::string& run_id) {
  const nlohmann::json j = {{"run_id", run_id}, {"created", utc_now()}};
  write_file_atomic((fs::path(out_dir) / "run.json").string(), j.dump(2) + "\n");
}

}  // namespace amp
