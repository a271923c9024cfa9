#pragma once
/**
 * Reading and writing the Hugging Face safetensors format: an 8-byte little-endian header
 * length, a JSON header naming each tensor's dtype, shape and byte range, then the raw
 * row-major little-endian data. Files interchange with the Python `safetensors` library.
 *
 *   lt::nn::save(model, "model.safetensors");
 *   lt::nn::load(model, "model.safetensors");   // strict: names and shapes must match
 *
 * Supported dtypes: F64, F32, F16, BF16, I64, I32, BOOL. Every malformed file gives
 * lt::Error naming the file, the tensor and the problem.
 */
#include <map>
#include <string>

#include "lazytrace/nn/module.h"

namespace lazytrace::nn {

/**
 * Writes `tensors` (materializing pending ones) and string `metadata` (the header's
 * "__metadata__") to `path`. Entries are sorted by name and their data laid out in that
 * order; the file is written to a temporary name first and renamed, so a failed save never
 * leaves a half-written file at `path`.
 */
void save_file(const ParamMap& tensors, const std::string& path,
               const std::map<std::string, std::string>& metadata = {});

/** Every tensor of the file, materialized in the file's dtype, sorted by name. */
ParamMap load_file(const std::string& path);

/** The header's "__metadata__" (empty if the file has none); validates the whole header. */
std::map<std::string, std::string> load_metadata(const std::string& path);

/**
 * Saves every parameter and buffer of `module` under its dotted name (as
 * named_parameters() and named_buffers() give them). Undefined buffers are skipped, as
 * PyTorch's state_dict skips None buffers.
 */
void save(const Module& module, const std::string& path);

/**
 * Loads a file written by save() (or by PyTorch's safetensors.torch.save_model) into
 * `module`, like load_state_dict(strict=True): the file must hold exactly the module's
 * parameter and (defined) buffer names, with the same shapes. Floating tensors convert to
 * the module's floating dtype; other dtypes must match. Everything is checked before
 * anything is assigned, so a failed load leaves the module unchanged. Parameters keep
 * requires_grad. A tied tensor that save_model wrote once, naming the other in the
 * metadata ({"head.weight": "embed.weight"}), loads under both names.
 */
void load(Module& module, const std::string& path);

}  // namespace lazytrace::nn
