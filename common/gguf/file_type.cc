#include "common/gguf/file_type.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace specd {
namespace {

struct Entry {
  uint32_t ftype;
  const char* name;
};
// llama.h's llama_ftype values (removed ones left out).
constexpr Entry kFileTypes[] = {
    {0, "ALL_F32"},   {1, "F16"},      {2, "Q4_0"},     {3, "Q4_1"},     {7, "Q8_0"},     {8, "Q5_0"},
    {9, "Q5_1"},      {10, "Q2_K"},    {11, "Q3_K_S"},  {12, "Q3_K_M"},  {13, "Q3_K_L"},  {14, "Q4_K_S"},
    {15, "Q4_K_M"},   {16, "Q5_K_S"},  {17, "Q5_K_M"},  {18, "Q6_K"},    {19, "IQ2_XXS"}, {20, "IQ2_XS"},
    {21, "Q2_K_S"},   {22, "IQ3_XS"},  {23, "IQ3_XXS"}, {24, "IQ1_S"},   {25, "IQ4_NL"},  {26, "IQ3_S"},
    {27, "IQ3_M"},    {28, "IQ2_S"},   {29, "IQ2_M"},   {30, "IQ4_XS"},  {31, "IQ1_M"},   {32, "BF16"},
    {36, "TQ1_0"},    {37, "TQ2_0"},   {38, "MXFP4_MOE"},
};

// The names specd accepts for --type beyond llama.cpp's own ftype names.
struct Alias {
  const char* name;
  uint32_t ftype;
};
constexpr Alias kAliases[] = {{"F32", 0}, {"Q3_K", 12}, {"Q4_K", 15}, {"Q5_K", 17}};

}  // namespace

std::optional<uint32_t> FileTypeForWeights(std::string_view type_or_mix) {
  const std::string up = absl::AsciiStrToUpper(std::string(type_or_mix));
  for (const auto& a : kAliases) {
    if (up == a.name) return a.ftype;
  }
  for (const auto& e : kFileTypes) {
    if (up == e.name) return e.ftype;
  }
  return std::nullopt;
}

std::optional<std::string_view> FileTypeName(uint32_t ftype) {
  for (const auto& e : kFileTypes) {
    if (e.ftype == ftype) return e.name;
  }
  return std::nullopt;
}

absl::StatusOr<FileTypeInfo> FileTypeOf(const GgufFile& f) {
  const GgufValue* v = f.Find(kFileTypeKey);
  if (!v) return absl::NotFoundError(absl::StrCat(f.path(), ": no ", kFileTypeKey));
  FileTypeInfo info;
  if (v->type == GgufValueType::STRING) {
    // Written by specd before file_type followed the spec: the mix's name.
    info.name = std::get<std::string>(v->scalar);
    info.legacy = true;
    const auto ft = FileTypeForWeights(info.name);
    if (!ft) {
      return absl::InvalidArgumentError(absl::StrCat(f.path(), ": ", kFileTypeKey, " is the string '", info.name,
                                                     "', which names no known weight type"));
    }
    info.ftype = *ft;
    return info;
  }
  if (v->type != GgufValueType::UINT32) {
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": ", kFileTypeKey, " has type ",
                                                   std::string(GgufValueTypeName(v->type)), ", expected UINT32"));
  }
  info.ftype = static_cast<uint32_t>(std::get<uint64_t>(v->scalar));
  const auto name = FileTypeName(info.ftype);
  if (!name) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": ", kFileTypeKey, " = ", info.ftype, " is not a llama_ftype llama.cpp defines"));
  }
  info.name = std::string(*name);
  return info;
}

}  // namespace specd
