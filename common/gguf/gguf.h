// GGUF v3 files: a validating, zero-copy (mmap) reader and a writer.
//
// The reader checks everything before anything is used: magic, version,
// counts against the file size, every string and array length, metadata value
// types, tensor types, dimensions (overflow), alignment, that every tensor's
// data lies inside the file and that no two tensors overlap. Errors name the
// file and what is wrong, e.g. "model.gguf: tensor 'blk.0.attn_q.weight' data
// [offset 1024, 4096 bytes) runs past the end of the file (3000 bytes)".
//
// Status codes: DATA_LOSS when the file is cut short (any read, string, array
// or tensor data past the end); UNIMPLEMENTED for GGUF versions other than 3;
// INVALID_ARGUMENT for every other malformed file. Getters: NOT_FOUND for a
// missing key, INVALID_ARGUMENT for a wrong type, OUT_OF_RANGE when an integer
// does not fit the requested type.
//
// Leniencies (kept deliberately, as llama.cpp's mmap loader does): bytes after
// the last tensor (including missing trailing padding) are not checked; a
// file without tensors may end before the aligned start of its data section;
// a BOOL byte other than 0/1 reads as true; UTF-8 is not validated.
//
// Arrays of arrays (legal in the format, rejected by ggml): the reader skips
// their contents safely (bounds-checked, nesting up to kGgufMaxArrayNesting)
// and keeps the key with elem_type ARRAY and only the outer element count in
// `arr_nested_count`; the writer refuses to write them.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/gguf/ggml_types.h"
#include "common/util/status.h"

namespace specd {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint32_t kGgufVersion = 3;
constexpr uint32_t kGgufDefaultAlignment = 32;
constexpr uint32_t kGgufMaxDims = 4;
constexpr int kGgufMaxArrayNesting = 16;  // arrays inside arrays, beyond that an error

enum class GgufValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
std::string_view GgufValueTypeName(GgufValueType t);
// UINT8..INT64 (not BOOL/FLOAT*).
bool GgufIsIntegerType(GgufValueType t);

// A metadata value. Scalars are widened to the variant's types but keep their
// declared GGUF type in `type`; arrays keep their element type in `elem_type`.
struct GgufValue {
  GgufValueType type = GgufValueType::UINT32;
  GgufValueType elem_type = GgufValueType::UINT32;  // for ARRAY
  std::variant<uint64_t, int64_t, double, bool, std::string> scalar;
  // ARRAY payloads: exactly one is filled, by element type family.
  std::vector<uint64_t> arr_uint;
  std::vector<int64_t> arr_int;
  std::vector<double> arr_float;
  std::vector<std::string> arr_str;
  std::vector<uint8_t> arr_bool;
  uint64_t arr_nested_count = 0;  // ARRAY of ARRAY: outer count, contents skipped

  size_t ArraySize() const;
  bool operator==(const GgufValue&) const = default;
  // Human-readable, arrays abbreviated after `max_items`.
  std::string ToString(size_t max_items = 8) const;

  static GgufValue U32(uint32_t v);
  static GgufValue I32(int32_t v);
  static GgufValue U64(uint64_t v);
  static GgufValue F32(float v);
  static GgufValue Bool(bool v);
  static GgufValue Str(std::string v);
  static GgufValue StrArray(std::vector<std::string> v);
  static GgufValue F32Array(std::vector<float> v);
  static GgufValue I32Array(std::vector<int32_t> v);
  // The remaining types. Array factories take the element type; the writer
  // checks that every value fits it.
  static GgufValue U8(uint8_t v);
  static GgufValue I8(int8_t v);
  static GgufValue U16(uint16_t v);
  static GgufValue I16(int16_t v);
  static GgufValue I64(int64_t v);
  static GgufValue F64(double v);
  static GgufValue UIntArray(GgufValueType elem, std::vector<uint64_t> v);  // UINT8..UINT64
  static GgufValue IntArray(GgufValueType elem, std::vector<int64_t> v);    // INT8..INT64
  static GgufValue FloatArray(GgufValueType elem, std::vector<double> v);   // FLOAT32/64
  static GgufValue BoolArray(std::vector<bool> v);
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;   // dims, ne[0] innermost (row length)
  uint64_t offset = 0;       // relative to the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // into the mapping (reader only)

  int64_t nelements() const;
  int64_t rows() const { return nelements() / (ne.empty() ? 1 : ne[0]); }
};

class GgufFile {
 public:
  // Maps and fully validates `path`.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Validates a buffer already in memory (the fuzzer and tests). The buffer
  // must outlive the returned object; `name` is used in error messages.
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBuffer(const uint8_t* data, size_t size,
                                                              std::string name = "<buffer>");
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  size_t file_size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }

  // Metadata, in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* Find(std::string_view key) const;
  bool Has(std::string_view key) const { return Find(key) != nullptr; }

  // Typed getters: an error names the file and key when it is missing or has
  // an incompatible type (any integer type converts to another if in range).
  absl::StatusOr<uint64_t> GetUInt(std::string_view key) const;
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;
  absl::StatusOr<double> GetFloat(std::string_view key) const;
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<std::string> GetString(std::string_view key) const;
  absl::StatusOr<const GgufValue*> GetArray(std::string_view key, GgufValueType elem_type) const;
  // With defaults when absent (still an error when present with a bad type).
  absl::StatusOr<uint64_t> GetUIntOr(std::string_view key, uint64_t def) const;
  absl::StatusOr<double> GetFloatOr(std::string_view key, double def) const;
  absl::StatusOr<std::string> GetStringOr(std::string_view key, std::string def) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;

 private:
  GgufFile() = default;
  absl::Status Parse();
  absl::Status ParseBody();  // Parse() minus the file name in front of errors

  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  void* map_ = nullptr;  // owned mapping (Open) or null (FromBuffer)
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Builds a GGUF v3 file: metadata in insertion order, tensors laid out in
// insertion order at the configured alignment. AddTensor copies data in;
// AddTensorLazy takes a function that produces the bytes when the file is
// written, straight into the file's mapping, so a model of any size is
// written holding about one tensor at a time and no copy of it.
class GgufWriter {
 public:
  // Fills exactly the tensor's byte count at `dst` (which may be a file
  // mapping: write every byte once, read none); called once, from the thread
  // that calls WriteFile/Serialize.
  using TensorFill = std::function<absl::Status(uint8_t* dst)>;

  // Also written as general.alignment (u32) when != 32; Serialize fails unless
  // it is a nonzero power of two. Set("general.alignment", U32(a)) is the same.
  void SetAlignment(uint32_t a);
  void Set(const std::string& key, GgufValue v);  // replaces an existing key in place
  // `ne` innermost first; `data` holds exactly RowBytes(type, ne[0]) * rows bytes.
  absl::Status AddTensor(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                         const void* data, size_t nbytes);
  absl::Status AddTensorF32(const std::string& name, std::vector<int64_t> ne, const float* data);
  absl::Status AddTensorLazy(const std::string& name, GgmlType type, std::vector<int64_t> ne, TensorFill fill);
  absl::StatusOr<std::vector<uint8_t>> Serialize() const;
  // Atomic: written to PATH.tmp (space reserved first, so a full disk is an
  // error, not a crash), then renamed. `sync` fsyncs before the rename,
  // so a crash cannot leave a complete name on partial data; without it the
  // kernel writes the file back when it likes (scratch models: a 15 GB file
  // is then written at memory speed instead of the disk's).
  absl::Status WriteFile(const std::string& path, bool sync = true) const;

 private:
  struct T {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    uint64_t nbytes = 0;
    std::vector<uint8_t> data;  // AddTensor
    TensorFill fill;            // AddTensorLazy
  };
  absl::Status CheckNewTensor(const std::string& name, GgmlType type, const std::vector<int64_t>& ne,
                              uint64_t* nbytes) const;
  // Everything before the first tensor's data (header, metadata, tensor
  // infos, padding).
  absl::StatusOr<std::vector<uint8_t>> Header() const;
  // Tensor i's bytes followed by its padding: ChunkSize(i) bytes at dst.
  size_t ChunkSize(size_t i) const;
  absl::Status FillChunk(size_t i, uint8_t* dst) const;

  uint32_t alignment_ = kGgufDefaultAlignment;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<T> tensors_;
};

}  // namespace specd
