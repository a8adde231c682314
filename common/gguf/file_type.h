// general.file_type: llama.cpp's llama_ftype, the UINT32 that names the type
// (or llama.cpp-style mix) of a file's weights. The numbering is llama.cpp's
// (include/llama.h) and must never change.
//
// Files specd wrote before it followed the spec stored the mix's name as a
// STRING ("Q4_K_M"); llama.cpp refuses those ("key general.file_type has wrong
// type str but expected type u32"). FileTypeOf reads both and says which.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/gguf/gguf.h"
#include "common/util/status.h"

namespace specd {

constexpr char kFileTypeKey[] = "general.file_type";
// general.quantization_version: GGML_QNT_VERSION, required by the GGUF spec
// when any tensor is quantized.
constexpr char kQuantVersionKey[] = "general.quantization_version";
constexpr uint32_t kGgmlQuantVersion = 2;

// The llama_ftype of a weight type or mix specd writes ("Q4_K_M" -> 15). A
// single k-quant type maps to what llama.cpp infers for a file of it (Q3_K ->
// Q3_K_M, Q4_K -> Q4_K_M, Q5_K -> Q5_K_M), as its loader does when the key is
// absent. nullopt for names that are neither.
std::optional<uint32_t> FileTypeForWeights(std::string_view type_or_mix);

// llama.cpp's name of an ftype without the "MOSTLY_" prefix ("Q4_K_M", "F16",
// "ALL_F32"); nullopt for numbers it does not define.
std::optional<std::string_view> FileTypeName(uint32_t ftype);

struct FileTypeInfo {
  uint32_t ftype = 0;
  std::string name;     // FileTypeName, or the legacy string as stored
  bool legacy = false;  // stored as a STRING by an older specd
};
// NOT_FOUND when the key is absent; INVALID_ARGUMENT for any other type, an
// unknown number or an unknown legacy name (never a silent guess).
absl::StatusOr<FileTypeInfo> FileTypeOf(const GgufFile& f);

}  // namespace specd
