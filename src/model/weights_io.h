// GPT weights in the formats other programs use, to and from the flat FP32 masters of gpt_layout():
//   safetensors  Hugging Face's GPT-2 layout (transformers' GPT2Model names: wte, wpe, h.N.ln_1,
//                h.N.attn.c_attn, h.N.attn.c_proj, h.N.ln_2, h.N.mlp.c_fc, h.N.mlp.c_proj, ln_f; its
//                Conv1D weights stored [in, out], the transpose of ours; the LM head tied to wte).
//                The file: an 8-byte little-endian header size, a JSON header naming each tensor's
//                dtype, shape and byte range, then the data.
//   llmc         llm.c's model file (gpt2_124M.bin): 256 int32 (magic 20240326, version 3, max T,
//                vocabulary V, layers, heads, channels, padded vocabulary Vp), then the FP32
//                tensors in llm.c's order (wte [Vp, C] with zero rows past V, wpe, then each kind
//                for every layer: ln_1 w/b, qkv w/b, attention proj w/b, ln_2 w/b, fc w/b, MLP
//                proj w/b, and ln_f w/b), weights [out, in] as ours. Version 1 (no padding) and 5
//                (BF16 values) are read too.
// Reading tells the formats apart by their first bytes; every mismatch (a missing, extra or
// misshapen tensor, another vocabulary or context length) is an error naming the file, the tensor
// and both shapes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "model/param_layout.h"
#include "model/weight_pieces.h"

namespace amp {

enum class WeightFormat { Safetensors, Llmc };

// Writes the masters (layout L of a GPT with options o) to path, which must not exist (written to a
// temporary first, then renamed: no half-written file is left). Errors are Output errors.
void write_gpt_weights(const std::string& path, WeightFormat f, const GptOptions& o, const ParamLayout& L,
                       const float* master);
// The same from a source read a tensor at a time in the file's order (holding one tensor, twice
// for one stored transposed); an error of the source (its finish() included, called before the
// file is put in place) leaves no file.
void write_gpt_weights(const std::string& path, WeightFormat f, const GptOptions& o, const ParamLayout& L,
                       TensorSource& src);

// The masters a weights file holds for layout L of a GPT with options o (padding elements 0), a
// piece at a time: the file's header is checked against the model when it is opened, its values as
// they are read (one that is not finite; an LM head that differs from wte). Holds a piece and, for a
// tensor stored transposed, that tensor. Errors are Checkpoint errors "KEY: PATH: what is wrong"
// (key: where the path came from). L must outlive the reader.
std::unique_ptr<WeightPieces> open_gpt_weights(const std::string& path, const GptOptions& o, const ParamLayout& L,
                                               const std::string& key);

// Whether the file starts like a safetensors or an llm.c model file (else: maybe a checkpoint).
bool looks_like_gpt_weights(const std::string& path);

}  // namespace amp
