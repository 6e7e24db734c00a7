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
//
// The reader trusts nothing in a file (the checksum is no defence: anyone can recompute it). The
// header must be a JSON object with "format" equal to the prefix's, "step" an integer >= 0 and
// "sections" an array of {"name": string, "offset": integer, "bytes": integer}, names unique, laid
// end to end from offset 0 in order and filling the bytes between the header and the checksum
// exactly. Any other field is the writer's business (the trainer checks the ones it needs).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/files.h"
#include "core/hash.h"

#include "amp/loss_scaler.h"

namespace amp {

constexpr uint32_t kCheckpointFormat = 1;

// A section a reader left in the file (load_checkpoint's SectionStream): where it lies and the
// hash64 of its bytes when the file was verified.
struct FileSection {
  uint64_t offset = 0, bytes = 0, hash = 0;
};

struct Checkpoint {
  nlohmann::json header;                              // descriptive fields (see checkpoint.cpp)
  std::map<std::string, std::vector<char>> sections;  // "master", "state1", "state2", "scalars", ...
  std::string path;                                   // where it was read from, for messages ("" if built here)
  std::map<std::string, FileSection> in_file;         // sections left in the file (read with SectionReader)
  std::shared_ptr<const ReadFile> file;               // the file they are read from (the descriptor verified)

  // header["step"]; throws Error(Checkpoint) if it is missing or not an integer >= 0 (never a json exception).
  int64_t step() const;
};

// A section to write, where its bytes already are (a run's state is not copied to be written), or
// made as it is written: `produce` hands exactly `bytes` bytes to its sink, in order (data null).
struct SectionView {
  const void* data = nullptr;
  size_t bytes = 0;
  std::function<void(const ByteSink&)> produce;
};
using SectionViews = std::map<std::string, SectionView>;

// Serializes and writes a checkpoint to dir/ckpt_step<step>.bin atomically, streaming its sections
// to the file; removes the oldest checkpoints of the same run (header "run_id") beyond `keep`,
// never another run's. Returns the path written.
std::string save_checkpoint(const std::string& dir, const nlohmann::json& header, const SectionViews& sections,
                            int keep);
// (ck's sections all in memory: one read with sections left in its file is an internal error.)
std::string save_checkpoint(const std::string& dir, const Checkpoint& ck, int keep);
// The file's bytes of `ck` (what save_checkpoint writes; the same condition).
std::string serialize_checkpoint(const Checkpoint& ck);
// Who wrote a checkpoint, from its prefix and JSON header only (the sections are not read).
struct CheckpointIdentity {
  bool readable = false;  // a regular file whose prefix and header parse (the checksum is not checked)
  std::string run_id;     // "" when the header has none (written before runs had identities)
  int64_t step = -1;      // the header's step (-1 when missing or not an integer)
};
CheckpointIdentity checkpoint_identity(const std::string& path);
// checkpoint_identity(path).run_id.
std::string checkpoint_run_id(const std::string& path);
// Run ids are 16 lower-case hex digits (they name folders: previous/<id>/).
bool valid_run_id(const std::string& id);

// Reads and verifies a checkpoint. Throws Error(Checkpoint) "checkpoint error: PATH: what is wrong"
// (missing, not a regular file, unreadable, truncated, bad magic, unknown format, malformed header
// naming the field, sections out of bounds, checksum mismatch) and no other exception. The file
// is read section by section into the result (its bytes are held once).
Checkpoint load_checkpoint(const std::string& path);
// Sections a reader leaves in the file, never holding them: each passes to `visit` in pieces of at
// most `piece` bytes while the file is verified (visit(name, 0, ...) first, once even for an empty
// section; what visit finds counts only when load_checkpoint returns: the checksum is checked
// after). They are in Checkpoint::in_file, not in its sections, read again with SectionReader.
struct SectionStream {
  std::set<std::string> names;
  std::function<void(const std::string& name, uint64_t at, const char* data, size_t n)> visit;
  size_t piece = size_t(64) << 20;
};
Checkpoint load_checkpoint(const std::string& path, const SectionStream& stream);

// A section left in the file, read front to back through the descriptor that was verified (a
// file renamed over the path since is not read). Every error is Error(Checkpoint) naming the file.
class SectionReader {
 public:
  SectionReader(const Checkpoint& ck, const std::string& name);
  // The section's next n bytes.
  void read(void* dst, size_t n);
  // Checks that the whole section was read and hashes as it did when verified (else the file
  // changed in place since).
  void finish() const;

 private:
  std::shared_ptr<const ReadFile> file_;
  std::string path_, name_;
  FileSection where_;
  uint64_t done_ = 0;
  Hasher hasher_;
};

// The same from the file's bytes (path only names it in messages).
Checkpoint parse_checkpoint(const std::string& data, const std::string& path);
// A regular file's bytes; anything else (FIFO, directory, device) is refused without blocking.
std::string read_file_bytes(const std::string& path);

// The step in a checkpoint file's name (ckpt_step<digits>.bin); -1 if the name is not one.
int64_t name_step(const std::string& path);

// Checkpoint files (regular files, or links to them, named ckpt_step<digits>.bin) in dir, newest step
// first. Entries so named that are not regular files are left out, each described in *skipped if given.
std::vector<std::string> list_checkpoints(const std::string& dir, std::vector<std::string>* skipped = nullptr);

// The newest checkpoint in dir that loads and verifies, whose file name's step is its header's and,
// when run_id is not empty, that run_id wrote; "" if none. Each one skipped is described in
// *skipped ("checkpoint error: PATH: reason").
// The checkpoint found is left in *found when given (read once, not again by the caller), the
// sections `stream` names left in its file when given.
std::string find_latest_intact(const std::string& dir, std::vector<std::string>* skipped,
                               const std::string& run_id = "", Checkpoint* found = nullptr,
                               const SectionStream* stream = nullptr);

}  // namespace amp
