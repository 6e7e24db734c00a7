// What a checkpoint says about the model that wrote it, for what uses a checkpoint outside its run
// (`amp_ddp sample`, `amp_ddp export`, model.init_from): the run's config, a tensor's rows in its
// layout, and its FP32 masters checked against a layout. Errors are Checkpoint errors
// "checkpoint error: CONTEXTPATH: what is wrong" (context: where the path came from, or "").
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "amp/fp8_scaling.h"

#include "config/config.h"
#include "model/param_layout.h"
#include "model/weight_pieces.h"
#include "train/checkpoint.h"

namespace amp {

// A checkpoint read for its masters (sample, export, eval, model.init_from): verified whole (the
// checksum), its weights left in the file (the masters read with checkpoint_master_pieces or
// checkpoint_master_tensors; the optimizer moments never: 8 bytes a parameter with AdamW).
Checkpoint load_checkpoint_header(const std::string& path);
// The config of the run that wrote ck (config_from_values of its header's "config").
Config checkpoint_config(const Checkpoint& ck, const std::string& context = "");
// Rows of the named tensor in ck's layout (0 when absent).
size_t checkpoint_rows(const Checkpoint& ck, const std::string& tensor);
// A section of FP32 values left in ck's file (the masters, a moment), read a piece at a time: the
// section is opened at the first piece (an error there is that piece's), `check` (when given)
// sees each piece and may throw; finish() checks that the whole section was read and hashes as it
// did when the file was verified. ck must outlive the reader.
using PieceCheck = std::function<void(size_t begin, const float* values, size_t count)>;
std::unique_ptr<WeightPieces> checkpoint_section_pieces(const Checkpoint& ck, const std::string& name,
                                                        PieceCheck check = {});
// ck's FP32 masters, when its layout is L (tensor by tensor: names and shapes), a piece at a time
// from the file: the layout is checked now, each piece's values as they are read (one that is not
// finite), and at finish() that the section still hashes as it did when the file was verified. ck
// and L must outlive the reader.
std::unique_ptr<WeightPieces> checkpoint_master_pieces(const Checkpoint& ck, const ParamLayout& L,
                                                       const std::string& context = "");
// The same a tensor at a time in any order (export writes llm.c's): the layout checked now, each
// tensor's values as read (one that is not finite), and at finish() the whole section read once
// more to check that it still hashes as it did when the file was verified. ck and L must outlive it.
std::unique_ptr<TensorSource> checkpoint_master_tensors(const Checkpoint& ck, const ParamLayout& L,
                                                        const std::string& context = "");
// The FP8 scales ck's run ended with (precision.compute fp8), one per tensor of `tensors`, when its
// FP8 tensors are these (by name, in order); each checked to be a power of two in pow2_floor's
// range (else a Checkpoint error). Empty when ck has none for them, *why then saying so.
std::vector<float> checkpoint_fp8_scales(const Checkpoint& ck, const std::vector<Fp8Tensor>& tensors, std::string* why,
                                         const std::string& context = "");

}  // namespace amp
