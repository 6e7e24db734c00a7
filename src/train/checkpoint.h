// Checkpoints: everything a run needs to continue bit for bit (FP32 masters, optimizer state,
// scaler state, the position in the data and the half-finished log interval), in one file written
// atomically (temporary file, fsync, rename, directory fsync) and verified by a checksum.
//
// File layout (little-endian):
//   "AMPCKPT\0" | u32 format version | u32 flags (0) | u64 header bytes | header (JSON) |
//   sections (raw bytes, offsets in the header) | u64 hash64 of every byte before it
// The JSON header names each section and says what wrote it (program version, config hash, world
// size, step, model layout, scaler state), so later formats can add sections (e.g. per-rank
// optimizer shards) without breaking old readers' error messages.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "amp/loss_scaler.h"

namespace amp {

constexpr uint32_t kCheckpointFormat = 1;

struct Checkpoint {
  nlohmann::json header;                            // descriptive fields (see checkpoint.cpp)
  std::map<std::string, std::vector<char>> sections;  // "master", "state1", "state2", "scaler", ...

  int64_t step() const { return header.at("step").get<int64_t>(); }
};

// Serializes and writes `ck` to dir/ckpt_step<step>.bin atomically; removes the oldest
// checkpoints beyond `keep`. Returns the path written.
std::string save_checkpoint(const std::string& dir, const Checkpoint& ck, int keep);

// Reads and verifies a checkpoint. Throws Error(Checkpoint) naming the file and what is wrong
// (missing, truncated, bad magic, unknown format, checksum mismatch, malformed header).
Checkpoint load_checkpoint(const std::string& path);
// The same from the file's bytes (path only names it in messages); read_file_bytes reads a file.
Checkpoint parse_checkpoint(const std::string& data, const std::string& path);
std::string read_file_bytes(const std::string& path);

// Checkpoint files in dir, newest step first.
std::vector<std::string> list_checkpoints(const std::string& dir);

// The newest checkpoint in dir that loads and verifies; "" if none. Each one skipped is
// described in *skipped ("path: reason").
std::string find_latest_intact(const std::string& dir, std::vector<std::string>* skipped);

}  // namespace amp
