#include "common/gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>

#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"

namespace specd {

// The file format is little-endian and the reader hands out pointers into the
// mapping, so a big-endian host would need a different design, not a fix-up.
static_assert(std::endian::native == std::endian::little, "specd assumes a little-endian host");

namespace {

constexpr uint32_t kMaxValueType = static_cast<uint32_t>(GgufValueType::FLOAT64);
// Smallest encodings, used to reject counts that cannot fit in what is left of
// the file before anything is allocated for them.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;               // empty key, u32 type, u8 value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, 1 dim

enum class Family { kUInt, kInt, kFloat, kBool, kString, kArray };

Family FamilyOf(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::UINT16:
    case GgufValueType::UINT32:
    case GgufValueType::UINT64: return Family::kUInt;
    case GgufValueType::INT8:
    case GgufValueType::INT16:
    case GgufValueType::INT32:
    case GgufValueType::INT64: return Family::kInt;
    case GgufValueType::FLOAT32:
    case GgufValueType::FLOAT64: return Family::kFloat;
    case GgufValueType::BOOL: return Family::kBool;
    case GgufValueType::STRING: return Family::kString;
    case GgufValueType::ARRAY: return Family::kArray;
  }
  return Family::kArray;  // unreachable for validated types
}

// Encoded size of a fixed-size value; 0 for STRING and ARRAY.
uint64_t ScalarSize(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::BOOL: return 1;
    case GgufValueType::UINT16:
    case GgufValueType::INT16: return 2;
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::FLOAT32: return 4;
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
    case GgufValueType::FLOAT64: return 8;
    case GgufValueType::STRING:
    case GgufValueType::ARRAY: return 0;
  }
  return 0;
}

uint64_t MinEncodedSize(GgufValueType t) {
  if (t == GgufValueType::STRING) return 8;
  if (t == GgufValueType::ARRAY) return 4 + 8;
  return ScalarSize(t);
}

// Range of the declared integer type, for the writer's checks.
bool UIntFits(GgufValueType t, uint64_t v) {
  switch (t) {
    case GgufValueType::UINT8: return v <= UINT8_MAX;
    case GgufValueType::UINT16: return v <= UINT16_MAX;
    case GgufValueType::UINT32: return v <= UINT32_MAX;
    default: return true;
  }
}
bool IntFits(GgufValueType t, int64_t v) {
  switch (t) {
    case GgufValueType::INT8: return v >= INT8_MIN && v <= INT8_MAX;
    case GgufValueType::INT16: return v >= INT16_MIN && v <= INT16_MAX;
    case GgufValueType::INT32: return v >= INT32_MIN && v <= INT32_MAX;
    default: return true;
  }
}

// Debian's abseil has its own string_view, which StrCat needs.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

bool IsPow2(uint64_t a) { return a != 0 && (a & (a - 1)) == 0; }

absl::Status Prefixed(const absl::Status& s, absl::string_view prefix) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

// Checks dims and type of a tensor and returns its size in bytes. Shared by
// the reader and the writer so both agree on what a valid tensor is.
absl::StatusOr<uint64_t> TensorBytes(absl::string_view name, uint32_t type_id, const std::vector<int64_t>& ne) {
  const auto traits = GetTypeTraits(type_id);
  if (!traits) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has unknown ggml type ", type_id));
  }
  if (ne.empty() || ne.size() > kGgufMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' has n_dims ", ne.size(), " (must be 1..", kGgufMaxDims, ")"));
  }
  int64_t n = 1;
  for (size_t i = 0; i < ne.size(); ++i) {
    if (ne[i] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' has dim ", i, " = ", ne[i], " (must be positive)"));
    }
    if (__builtin_mul_overflow(n, ne[i], &n)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' element count overflows (dims ",
                                                     absl::StrJoin(ne, " x "), ")"));
    }
  }
  if (ne[0] % traits->block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has row length ", ne[0],
                                                   ", not a multiple of the ", traits->name, " block size ",
                                                   traits->block_size));
  }
  // Same value as RowBytes(type, ne[0]) * rows, computed without overflow.
  const uint64_t rows = static_cast<uint64_t>(n / ne[0]);
  uint64_t row_bytes = 0, nbytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(ne[0] / traits->block_size), traits->type_size, &row_bytes) ||
      __builtin_mul_overflow(row_bytes, rows, &nbytes)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' byte size overflows (dims ",
                                                   absl::StrJoin(ne, " x "), ", type ", traits->name, ")"));
  }
  return nbytes;
}

// Bounds-checked little-endian reads over the file. Errors carry no file name;
// GgufFile::Parse prefixes it once.
class Cursor {
 public:
  Cursor(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  size_t pos() const { return pos_; }
  uint64_t remaining() const { return n_ - pos_; }

  absl::Status Truncated(uint64_t need, absl::string_view what) const {
    return absl::DataLossError(absl::StrCat("truncated file: ", what, " at offset ", pos_, " needs ", need,
                                            " bytes, only ", remaining(), " remain"));
  }

  template <typename T>
  absl::Status Read(T* out, absl::string_view what) {
    if (remaining() < sizeof(T)) return Truncated(sizeof(T), what);
    std::memcpy(out, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }

  absl::Status Skip(uint64_t n, absl::string_view what) {
    if (remaining() < n) return Truncated(n, what);
    pos_ += n;
    return absl::OkStatus();
  }

  // A gguf string: u64 length + bytes. `out` may be null to skip it.
  absl::Status ReadString(std::string* out, absl::string_view what) {
    uint64_t len = 0;
    SPECD_RETURN_IF_ERROR(Read(&len, what));
    if (len > remaining()) {
      return absl::DataLossError(absl::StrCat("truncated file: ", what, " at offset ", pos_ - 8, " has length ", len,
                                              " but only ", remaining(), " bytes remain"));
    }
    if (out) out->assign(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return absl::OkStatus();
  }

  // A u32 value type that must be one the format defines.
  absl::Status ReadType(GgufValueType* out, absl::string_view what) {
    uint32_t t = 0;
    SPECD_RETURN_IF_ERROR(Read(&t, what));
    if (t > kMaxValueType) return absl::InvalidArgumentError(absl::StrCat(what, " is unknown value type ", t));
    *out = static_cast<GgufValueType>(t);
    return absl::OkStatus();
  }

  // An array count, rejected when its elements could not fit in the rest of
  // the file (so nothing is ever allocated from an absurd count).
  absl::Status ReadCount(uint64_t* count, GgufValueType elem, absl::string_view what) {
    SPECD_RETURN_IF_ERROR(Read(count, what));
    const uint64_t min = MinEncodedSize(elem);
    if (*count > remaining() / min) {
      return absl::DataLossError(absl::StrCat("truncated file: ", what, " at offset ", pos_ - 8, " is ", *count,
                                              " elements of ", Sv(GgufValueTypeName(elem)), " (at least ",
                                              min, " bytes each) but only ", remaining(), " bytes remain"));
    }
    return absl::OkStatus();
  }

  // Reads one fixed-size element; the caller has checked the bounds.
  template <typename T>
  T Get() {
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
};

// Reads a fixed-size scalar of type `t`, widened by family; bounds already checked.
void GetScalar(Cursor& c, GgufValueType t, uint64_t* u, int64_t* i, double* f) {
  switch (t) {
    case GgufValueType::UINT8: *u = c.Get<uint8_t>(); break;
    case GgufValueType::UINT16: *u = c.Get<uint16_t>(); break;
    case GgufValueType::UINT32: *u = c.Get<uint32_t>(); break;
    case GgufValueType::UINT64: *u = c.Get<uint64_t>(); break;
    case GgufValueType::BOOL: *u = c.Get<uint8_t>() != 0; break;
    case GgufValueType::INT8: *i = c.Get<int8_t>(); break;
    case GgufValueType::INT16: *i = c.Get<int16_t>(); break;
    case GgufValueType::INT32: *i = c.Get<int32_t>(); break;
    case GgufValueType::INT64: *i = c.Get<int64_t>(); break;
    case GgufValueType::FLOAT32: *f = c.Get<float>(); break;
    case GgufValueType::FLOAT64: *f = c.Get<double>(); break;
    case GgufValueType::STRING:
    case GgufValueType::ARRAY: break;
  }
}

// Skips the body (elem type, count, elements) of a nested array.
absl::Status SkipArray(Cursor& c, int depth) {
  if (depth > kGgufMaxArrayNesting) {
    return absl::InvalidArgumentError(
        absl::StrCat("arrays nested more than ", kGgufMaxArrayNesting, " deep at offset ", c.pos()));
  }
  GgufValueType elem = GgufValueType::UINT8;
  SPECD_RETURN_IF_ERROR(c.ReadType(&elem, "nested array element type"));
  uint64_t count = 0;
  SPECD_RETURN_IF_ERROR(c.ReadCount(&count, elem, "nested array count"));
  if (elem == GgufValueType::STRING) {
    for (uint64_t k = 0; k < count; ++k) SPECD_RETURN_IF_ERROR(c.ReadString(nullptr, "nested array string"));
  } else if (elem == GgufValueType::ARRAY) {
    for (uint64_t k = 0; k < count; ++k) SPECD_RETURN_IF_ERROR(SkipArray(c, depth + 1));
  } else {
    SPECD_RETURN_IF_ERROR(c.Skip(count * ScalarSize(elem), "nested array elements"));  // count checked
  }
  return absl::OkStatus();
}

absl::Status ReadValue(Cursor& c, GgufValueType type, GgufValue* v) {
  v->type = type;
  if (type == GgufValueType::STRING) {
    std::string s;
    SPECD_RETURN_IF_ERROR(c.ReadString(&s, "string value"));
    v->scalar = std::move(s);
    return absl::OkStatus();
  }
  if (type != GgufValueType::ARRAY) {
    if (c.remaining() < ScalarSize(type)) return c.Truncated(ScalarSize(type), "value");
    uint64_t u = 0;
    int64_t i = 0;
    double f = 0;
    GetScalar(c, type, &u, &i, &f);
    switch (FamilyOf(type)) {
      case Family::kUInt: v->scalar = u; break;
      case Family::kInt: v->scalar = i; break;
      case Family::kFloat: v->scalar = f; break;
      case Family::kBool: v->scalar = u != 0; break;
      default: break;
    }
    return absl::OkStatus();
  }
  GgufValueType elem = GgufValueType::UINT8;
  SPECD_RETURN_IF_ERROR(c.ReadType(&elem, "array element type"));
  v->elem_type = elem;
  uint64_t count = 0;
  SPECD_RETURN_IF_ERROR(c.ReadCount(&count, elem, "array count"));
  switch (FamilyOf(elem)) {
    case Family::kString:
      v->arr_str.reserve(count);
      for (uint64_t k = 0; k < count; ++k) {
        std::string s;
        SPECD_RETURN_IF_ERROR(c.ReadString(&s, "array string"));
        v->arr_str.push_back(std::move(s));
      }
      break;
    case Family::kArray:
      v->arr_nested_count = count;
      for (uint64_t k = 0; k < count; ++k) SPECD_RETURN_IF_ERROR(SkipArray(c, 2));
      break;
    case Family::kUInt:
    case Family::kBool:
    case Family::kInt:
    case Family::kFloat: {
      // ReadCount guaranteed count * size bytes are present.
      const Family fam = FamilyOf(elem);
      if (fam == Family::kUInt) v->arr_uint.resize(count);
      if (fam == Family::kInt) v->arr_int.resize(count);
      if (fam == Family::kFloat) v->arr_float.resize(count);
      if (fam == Family::kBool) v->arr_bool.resize(count);
      for (uint64_t k = 0; k < count; ++k) {
        uint64_t u = 0;
        int64_t i = 0;
        double f = 0;
        GetScalar(c, elem, &u, &i, &f);
        if (fam == Family::kUInt) v->arr_uint[k] = u;
        if (fam == Family::kInt) v->arr_int[k] = i;
        if (fam == Family::kFloat) v->arr_float[k] = f;
        if (fam == Family::kBool) v->arr_bool[k] = static_cast<uint8_t>(u);
      }
      break;
    }
  }
  return absl::OkStatus();
}

std::string FormatDouble(double d) { return absl::StrFormat("%g", d); }

}  // namespace

// ---------------------------------------------------------------------------
// GgufValue

std::string_view GgufValueTypeName(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8: return "UINT8";
    case GgufValueType::INT8: return "INT8";
    case GgufValueType::UINT16: return "UINT16";
    case GgufValueType::INT16: return "INT16";
    case GgufValueType::UINT32: return "UINT32";
    case GgufValueType::INT32: return "INT32";
    case GgufValueType::FLOAT32: return "FLOAT32";
    case GgufValueType::BOOL: return "BOOL";
    case GgufValueType::STRING: return "STRING";
    case GgufValueType::ARRAY: return "ARRAY";
    case GgufValueType::UINT64: return "UINT64";
    case GgufValueType::INT64: return "INT64";
    case GgufValueType::FLOAT64: return "FLOAT64";
  }
  return "UNKNOWN";
}

bool GgufIsIntegerType(GgufValueType t) {
  const uint32_t id = static_cast<uint32_t>(t);
  if (id > kMaxValueType) return false;
  const Family f = FamilyOf(t);
  return f == Family::kUInt || f == Family::kInt;
}

size_t GgufValue::ArraySize() const {
  if (type != GgufValueType::ARRAY) return 0;
  switch (FamilyOf(elem_type)) {
    case Family::kUInt: return arr_uint.size();
    case Family::kInt: return arr_int.size();
    case Family::kFloat: return arr_float.size();
    case Family::kBool: return arr_bool.size();
    case Family::kString: return arr_str.size();
    case Family::kArray: return arr_nested_count;
  }
  return 0;
}

std::string GgufValue::ToString(size_t max_items) const {
  if (type != GgufValueType::ARRAY) {
    if (const auto* u = std::get_if<uint64_t>(&scalar)) return absl::StrCat(*u);
    if (const auto* i = std::get_if<int64_t>(&scalar)) return absl::StrCat(*i);
    if (const auto* d = std::get_if<double>(&scalar)) return FormatDouble(*d);
    if (const auto* b = std::get_if<bool>(&scalar)) return *b ? "true" : "false";
    return absl::StrCat("\"", absl::CEscape(std::get<std::string>(scalar)), "\"");
  }
  const size_t n = ArraySize();
  if (elem_type == GgufValueType::ARRAY) return absl::StrCat("[", n, " nested arrays, not read]");
  std::string out = "[";
  for (size_t k = 0; k < n && k < max_items; ++k) {
    if (k) out += ", ";
    switch (FamilyOf(elem_type)) {
      case Family::kUInt: absl::StrAppend(&out, arr_uint[k]); break;
      case Family::kInt: absl::StrAppend(&out, arr_int[k]); break;
      case Family::kFloat: out += FormatDouble(arr_float[k]); break;
      case Family::kBool: out += arr_bool[k] ? "true" : "false"; break;
      case Family::kString: absl::StrAppend(&out, "\"", absl::CEscape(arr_str[k]), "\""); break;
      case Family::kArray: break;
    }
  }
  if (n > max_items) absl::StrAppend(&out, max_items ? ", " : "", "... (", n, " items)");
  out += "]";
  return out;
}

namespace {
GgufValue UIntScalar(GgufValueType t, uint64_t v) {
  GgufValue g;
  g.type = t;
  g.scalar = v;
  return g;
}
GgufValue IntScalar(GgufValueType t, int64_t v) {
  GgufValue g;
  g.type = t;
  g.scalar = v;
  return g;
}
GgufValue FloatScalar(GgufValueType t, double v) {
  GgufValue g;
  g.type = t;
  g.scalar = v;
  return g;
}
GgufValue ArrayOf(GgufValueType elem) {
  GgufValue g;
  g.type = GgufValueType::ARRAY;
  g.elem_type = elem;
  return g;
}
}  // namespace

GgufValue GgufValue::U8(uint8_t v) { return UIntScalar(GgufValueType::UINT8, v); }
GgufValue GgufValue::U16(uint16_t v) { return UIntScalar(GgufValueType::UINT16, v); }
GgufValue GgufValue::U32(uint32_t v) { return UIntScalar(GgufValueType::UINT32, v); }
GgufValue GgufValue::U64(uint64_t v) { return UIntScalar(GgufValueType::UINT64, v); }
GgufValue GgufValue::I8(int8_t v) { return IntScalar(GgufValueType::INT8, v); }
GgufValue GgufValue::I16(int16_t v) { return IntScalar(GgufValueType::INT16, v); }
GgufValue GgufValue::I32(int32_t v) { return IntScalar(GgufValueType::INT32, v); }
GgufValue GgufValue::I64(int64_t v) { return IntScalar(GgufValueType::INT64, v); }
GgufValue GgufValue::F32(float v) { return FloatScalar(GgufValueType::FLOAT32, v); }
GgufValue GgufValue::F64(double v) { return FloatScalar(GgufValueType::FLOAT64, v); }

GgufValue GgufValue::Bool(bool v) {
  GgufValue g;
  g.type = GgufValueType::BOOL;
  g.scalar = v;
  return g;
}

GgufValue GgufValue::Str(std::string v) {
  GgufValue g;
  g.type = GgufValueType::STRING;
  g.scalar = std::move(v);
  return g;
}

GgufValue GgufValue::StrArray(std::vector<std::string> v) {
  GgufValue g = ArrayOf(GgufValueType::STRING);
  g.arr_str = std::move(v);
  return g;
}

GgufValue GgufValue::F32Array(std::vector<float> v) {
  GgufValue g = ArrayOf(GgufValueType::FLOAT32);
  g.arr_float.assign(v.begin(), v.end());
  return g;
}

GgufValue GgufValue::I32Array(std::vector<int32_t> v) {
  GgufValue g = ArrayOf(GgufValueType::INT32);
  g.arr_int.assign(v.begin(), v.end());
  return g;
}

GgufValue GgufValue::UIntArray(GgufValueType elem, std::vector<uint64_t> v) {
  GgufValue g = ArrayOf(elem);
  g.arr_uint = std::move(v);
  return g;
}

GgufValue GgufValue::IntArray(GgufValueType elem, std::vector<int64_t> v) {
  GgufValue g = ArrayOf(elem);
  g.arr_int = std::move(v);
  return g;
}

GgufValue GgufValue::FloatArray(GgufValueType elem, std::vector<double> v) {
  GgufValue g = ArrayOf(elem);
  g.arr_float = std::move(v);
  return g;
}

GgufValue GgufValue::BoolArray(std::vector<bool> v) {
  GgufValue g = ArrayOf(GgufValueType::BOOL);
  g.arr_bool.assign(v.begin(), v.end());
  return g;
}

int64_t GgufTensorInfo::nelements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

// ---------------------------------------------------------------------------
// GgufFile

GgufFile::~GgufFile() {
  if (map_) munmap(map_, size_);
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = absl::StrCat(path, ": cannot open: ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(msg);
    if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
    return absl::UnavailableError(msg);
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat(path, ": cannot stat: ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {  // mmap rejects length 0; Parse reports the empty file
    void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return absl::ResourceExhaustedError(absl::StrCat(path, ": cannot mmap ", f->size_, " bytes: ", std::strerror(err)));
    }
    f->map_ = p;
    f->base_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
  SPECD_RETURN_IF_ERROR(f->Parse());
  return f;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBuffer(const uint8_t* data, size_t size, std::string name) {
  if (data == nullptr && size != 0) return absl::InvalidArgumentError(absl::StrCat(name, ": null buffer"));
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = std::move(name);
  f->base_ = data;
  f->size_ = size;
  SPECD_RETURN_IF_ERROR(f->Parse());
  return f;
}

absl::Status GgufFile::ParseBody() {
  Cursor c(base_, size_);
  uint32_t magic = 0;
  SPECD_RETURN_IF_ERROR(c.Read(&magic, "magic"));
  if (magic != kGgufMagic) {
    return absl::InvalidArgumentError(absl::StrFormat("bad magic 0x%08x (expected 0x%08x \"GGUF\"): not a GGUF file",
                                                      magic, kGgufMagic));
  }
  SPECD_RETURN_IF_ERROR(c.Read(&version_, "version"));
  if (version_ != kGgufVersion) {
    const bool swapped = (version_ & 0xffff) == 0 && version_ != 0;
    return absl::UnimplementedError(absl::StrCat("unsupported GGUF version ", version_, " (specd reads v3",
                                                 swapped ? "; this looks like a big-endian file)" : ")"));
  }
  uint64_t tensor_count = 0, kv_count = 0;
  SPECD_RETURN_IF_ERROR(c.Read(&tensor_count, "tensor_count"));
  SPECD_RETURN_IF_ERROR(c.Read(&kv_count, "metadata_kv_count"));
  if (kv_count > c.remaining() / kMinKvBytes) {
    return absl::InvalidArgumentError(absl::StrCat("metadata_kv_count ", kv_count, " is more than the remaining ",
                                                   c.remaining(), " bytes could hold"));
  }
  if (tensor_count > c.remaining() / kMinTensorInfoBytes) {
    return absl::InvalidArgumentError(absl::StrCat("tensor_count ", tensor_count, " is more than the remaining ",
                                                   c.remaining(), " bytes could hold"));
  }

  kv_.reserve(kv_count);
  for (uint64_t k = 0; k < kv_count; ++k) {
    std::string key;
    SPECD_RETURN_IF_ERROR(c.ReadString(&key, absl::StrCat("key of metadata entry ", k)));
    if (kv_index_.count(key)) return absl::InvalidArgumentError(absl::StrCat("duplicate metadata key '", key, "'"));
    const std::string ctx = absl::StrCat("key '", key, "': ");
    GgufValueType type = GgufValueType::UINT8;
    SPECD_RETURN_IF_ERROR(Prefixed(c.ReadType(&type, "value type"), ctx));
    GgufValue v;
    SPECD_RETURN_IF_ERROR(Prefixed(ReadValue(c, type, &v), ctx));
    kv_index_.emplace(key, kv_.size());
    kv_.emplace_back(std::move(key), std::move(v));
  }

  tensors_.reserve(tensor_count);
  for (uint64_t k = 0; k < tensor_count; ++k) {
    GgufTensorInfo t;
    SPECD_RETURN_IF_ERROR(c.ReadString(&t.name, absl::StrCat("name of tensor ", k)));
    if (tensor_index_.count(t.name)) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate tensor name '", t.name, "'"));
    }
    const std::string ctx = absl::StrCat("tensor '", t.name, "' ");
    uint32_t n_dims = 0;
    SPECD_RETURN_IF_ERROR(c.Read(&n_dims, ctx + "n_dims"));
    if (n_dims == 0 || n_dims > kGgufMaxDims) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "' has n_dims ", n_dims, " (must be 1..", kGgufMaxDims, ")"));
    }
    t.ne.resize(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = 0;
      SPECD_RETURN_IF_ERROR(c.Read(&dim, ctx + "dims"));
      t.ne[d] = static_cast<int64_t>(dim);  // > INT64_MAX turns negative and is rejected below
    }
    uint32_t type_id = 0;
    SPECD_RETURN_IF_ERROR(c.Read(&type_id, ctx + "type"));
    SPECD_RETURN_IF_ERROR(c.Read(&t.offset, ctx + "offset"));
    SPECD_ASSIGN_OR_RETURN(t.nbytes, TensorBytes(t.name, type_id, t.ne));
    t.type = static_cast<GgmlType>(type_id);
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  if (auto it = kv_index_.find("general.alignment"); it != kv_index_.end()) {
    const GgufValue& v = kv_[it->second].second;
    if (v.type != GgufValueType::UINT32) {
      return absl::InvalidArgumentError(
          absl::StrCat("general.alignment has type ", Sv(GgufValueTypeName(v.type)), ", expected UINT32"));
    }
    const uint64_t a = std::get<uint64_t>(v.scalar);
    if (!IsPow2(a)) {
      return absl::InvalidArgumentError(absl::StrCat("general.alignment ", a, " is not a nonzero power of two"));
    }
    alignment_ = static_cast<uint32_t>(a);
  }
  data_offset_ = AlignUp(c.pos(), alignment_);
  if (tensors_.empty()) return absl::OkStatus();
  if (data_offset_ > size_) {
    return absl::DataLossError(absl::StrCat("truncated file: data section starts at ", data_offset_,
                                            ", past the end of the file (", size_, " bytes)"));
  }

  const uint64_t data_size = size_ - data_offset_;
  for (GgufTensorInfo& t : tensors_) {
    if (t.offset % alignment_ != 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' offset ", t.offset,
                                                     " is not a multiple of the alignment ", alignment_));
    }
    if (t.offset > data_size) {
      return absl::DataLossError(absl::StrCat("tensor '", t.name, "' data offset ", t.offset,
                                              " is past the end of the data section (", data_size, " bytes at ",
                                              data_offset_, ", file ", size_, " bytes)"));
    }
    if (t.nbytes > data_size - t.offset) {
      return absl::DataLossError(absl::StrCat("tensor '", t.name, "' data [offset ", data_offset_ + t.offset, ", ",
                                              t.nbytes, " bytes) runs past the end of the file (", size_,
                                              " bytes)"));
    }
    t.data = base_ + data_offset_ + t.offset;
  }

  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const auto& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const GgufTensorInfo& a = *by_offset[k - 1];
    const GgufTensorInfo& b = *by_offset[k];
    if (b.offset < a.offset + a.nbytes) {  // both lie inside the file: no overflow
      return absl::InvalidArgumentError(absl::StrCat("tensors '", a.name, "' [offset ", a.offset, ", ", a.nbytes,
                                                     " bytes) and '", b.name, "' [offset ", b.offset, ", ",
                                                     b.nbytes, " bytes) overlap"));
    }
  }
  return absl::OkStatus();
}

// Names the file once for every error; a file that fails is never handed out.
absl::Status GgufFile::Parse() { return Prefixed(ParseBody(), absl::StrCat(path_, ": ")); }

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

absl::Status Missing(const std::string& path, absl::string_view key) {
  return absl::NotFoundError(absl::StrCat(path, ": required key '", key, "' is missing"));
}

absl::Status WrongType(const std::string& path, absl::string_view key, const GgufValue& v, absl::string_view want) {
  std::string have(GgufValueTypeName(v.type));
  if (v.type == GgufValueType::ARRAY) have = absl::StrCat("ARRAY of ", Sv(GgufValueTypeName(v.elem_type)));
  return absl::InvalidArgumentError(absl::StrCat(path, ": key '", key, "' has type ", have, ", expected ", want));
}

}  // namespace

absl::StatusOr<uint64_t> GgufFile::GetUInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(path_, Sv(key));
  if (!GgufIsIntegerType(v->type)) return WrongType(path_, Sv(key), *v, "an integer");
  if (const auto* u = std::get_if<uint64_t>(&v->scalar)) return *u;
  const int64_t i = std::get<int64_t>(v->scalar);
  if (i < 0) {
    return absl::OutOfRangeError(
        absl::StrCat(path_, ": key '", Sv(key), "' is ", i, ", expected a non-negative integer"));
  }
  return static_cast<uint64_t>(i);
}

absl::StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(path_, Sv(key));
  if (!GgufIsIntegerType(v->type)) return WrongType(path_, Sv(key), *v, "an integer");
  if (const auto* i = std::get_if<int64_t>(&v->scalar)) return *i;
  const uint64_t u = std::get<uint64_t>(v->scalar);
  if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::OutOfRangeError(absl::StrCat(path_, ": key '", Sv(key), "' is ", u, ", too large for int64"));
  }
  return static_cast<int64_t>(u);
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(path_, Sv(key));
  if (v->type == GgufValueType::FLOAT32 || v->type == GgufValueType::FLOAT64) return std::get<double>(v->scalar);
  if (!GgufIsIntegerType(v->type)) return WrongType(path_, Sv(key), *v, "a number");
  if (const auto* u = std::get_if<uint64_t>(&v->scalar)) return static_cast<double>(*u);
  return static_cast<double>(std::get<int64_t>(v->scalar));
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(path_, Sv(key));
  if (v->type != GgufValueType::BOOL) return WrongType(path_, Sv(key), *v, "BOOL");
  return std::get<bool>(v->scalar);
}

absl::StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(path_, Sv(key));
  if (v->type != GgufValueType::STRING) return WrongType(path_, Sv(key), *v, "STRING");
  return std::get<std::string>(v->scalar);
}

absl::StatusOr<const GgufValue*> GgufFile::GetArray(std::string_view key, GgufValueType elem_type) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(path_, Sv(key));
  if (v->type != GgufValueType::ARRAY || v->elem_type != elem_type) {
    return WrongType(path_, Sv(key), *v, absl::StrCat("ARRAY of ", Sv(GgufValueTypeName(elem_type))));
  }
  return v;
}

absl::StatusOr<uint64_t> GgufFile::GetUIntOr(std::string_view key, uint64_t def) const {
  if (!Has(key)) return def;
  return GetUInt(key);
}

absl::StatusOr<double> GgufFile::GetFloatOr(std::string_view key, double def) const {
  if (!Has(key)) return def;
  return GetFloat(key);
}

absl::StatusOr<std::string> GgufFile::GetStringOr(std::string_view key, std::string def) const {
  if (!Has(key)) return def;
  return GetString(key);
}

// ---------------------------------------------------------------------------
// GgufWriter

namespace {

constexpr char kAlignmentKey[] = "general.alignment";

class Out {
 public:
  explicit Out(std::vector<uint8_t>* b) : b_(b) {}
  template <typename T>
  void Put(T v) {
    const size_t n = b_->size();
    b_->resize(n + sizeof(T));
    std::memcpy(b_->data() + n, &v, sizeof(T));
  }
  void Bytes(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    b_->insert(b_->end(), c, c + n);
  }
  void Str(std::string_view s) {
    Put<uint64_t>(s.size());
    Bytes(s.data(), s.size());
  }
  void PadTo(uint64_t a) { b_->resize(AlignUp(b_->size(), a), 0); }

 private:
  std::vector<uint8_t>* b_;
};

// Writes one fixed-size element of type t from its widened value, after
// checking it fits the declared type.
absl::Status PutUInt(Out& o, GgufValueType t, uint64_t v) {
  if (!UIntFits(t, v)) return absl::OutOfRangeError(absl::StrCat(v, " does not fit ", Sv(GgufValueTypeName(t))));
  switch (t) {
    case GgufValueType::UINT8: o.Put<uint8_t>(static_cast<uint8_t>(v)); break;
    case GgufValueType::UINT16: o.Put<uint16_t>(static_cast<uint16_t>(v)); break;
    case GgufValueType::UINT32: o.Put<uint32_t>(static_cast<uint32_t>(v)); break;
    default: o.Put<uint64_t>(v); break;
  }
  return absl::OkStatus();
}

absl::Status PutInt(Out& o, GgufValueType t, int64_t v) {
  if (!IntFits(t, v)) return absl::OutOfRangeError(absl::StrCat(v, " does not fit ", Sv(GgufValueTypeName(t))));
  switch (t) {
    case GgufValueType::INT8: o.Put<int8_t>(static_cast<int8_t>(v)); break;
    case GgufValueType::INT16: o.Put<int16_t>(static_cast<int16_t>(v)); break;
    case GgufValueType::INT32: o.Put<int32_t>(static_cast<int32_t>(v)); break;
    default: o.Put<int64_t>(v); break;
  }
  return absl::OkStatus();
}

void PutFloat(Out& o, GgufValueType t, double v) {
  if (t == GgufValueType::FLOAT32) {
    o.Put<float>(static_cast<float>(v));
  } else {
    o.Put<double>(v);
  }
}

absl::Status PutValue(Out& o, const GgufValue& v) {
  if (static_cast<uint32_t>(v.type) > kMaxValueType) {
    return absl::InvalidArgumentError(absl::StrCat("unknown value type ", static_cast<uint32_t>(v.type)));
  }
  o.Put<uint32_t>(static_cast<uint32_t>(v.type));
  const auto wrong = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("the value held does not match its declared type ", Sv(GgufValueTypeName(v.type))));
  };
  switch (FamilyOf(v.type)) {
    case Family::kUInt: {
      const auto* u = std::get_if<uint64_t>(&v.scalar);
      if (!u) return wrong();
      return PutUInt(o, v.type, *u);
    }
    case Family::kInt: {
      const auto* i = std::get_if<int64_t>(&v.scalar);
      if (!i) return wrong();
      return PutInt(o, v.type, *i);
    }
    case Family::kFloat: {
      const auto* d = std::get_if<double>(&v.scalar);
      if (!d) return wrong();
      PutFloat(o, v.type, *d);
      return absl::OkStatus();
    }
    case Family::kBool: {
      const auto* b = std::get_if<bool>(&v.scalar);
      if (!b) return wrong();
      o.Put<uint8_t>(*b ? 1 : 0);
      return absl::OkStatus();
    }
    case Family::kString: {
      const auto* s = std::get_if<std::string>(&v.scalar);
      if (!s) return wrong();
      o.Str(*s);
      return absl::OkStatus();
    }
    case Family::kArray: break;
  }
  if (static_cast<uint32_t>(v.elem_type) > kMaxValueType) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown array element type ", static_cast<uint32_t>(v.elem_type)));
  }
  o.Put<uint32_t>(static_cast<uint32_t>(v.elem_type));
  switch (FamilyOf(v.elem_type)) {
    case Family::kUInt:
      o.Put<uint64_t>(v.arr_uint.size());
      for (uint64_t x : v.arr_uint) SPECD_RETURN_IF_ERROR(PutUInt(o, v.elem_type, x));
      break;
    case Family::kInt:
      o.Put<uint64_t>(v.arr_int.size());
      for (int64_t x : v.arr_int) SPECD_RETURN_IF_ERROR(PutInt(o, v.elem_type, x));
      break;
    case Family::kFloat:
      o.Put<uint64_t>(v.arr_float.size());
      for (double x : v.arr_float) PutFloat(o, v.elem_type, x);
      break;
    case Family::kBool:
      o.Put<uint64_t>(v.arr_bool.size());
      for (uint8_t x : v.arr_bool) o.Put<uint8_t>(x ? 1 : 0);
      break;
    case Family::kString:
      o.Put<uint64_t>(v.arr_str.size());
      for (const auto& s : v.arr_str) o.Str(s);
      break;
    case Family::kArray:
      return absl::UnimplementedError("arrays of arrays cannot be written");
  }
  return absl::OkStatus();
}

}  // namespace

void GgufWriter::SetAlignment(uint32_t a) {
  alignment_ = a;
  if (a != kGgufDefaultAlignment) {
    Set(std::string(kAlignmentKey), GgufValue::U32(a));
  } else {
    std::erase_if(kv_, [](const auto& kv) { return kv.first == kAlignmentKey; });
  }
}

void GgufWriter::Set(const std::string& key, GgufValue v) {
  // Keep the layout and the key in agreement; a non-u32 value is kept as given
  // and makes Serialize fail, since no reader would accept it.
  if (key == kAlignmentKey && v.type == GgufValueType::UINT32) {
    if (const auto* u = std::get_if<uint64_t>(&v.scalar)) alignment_ = static_cast<uint32_t>(*u);
  }
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  }
  kv_.emplace_back(key, std::move(v));
}

absl::Status GgufWriter::CheckNewTensor(const std::string& name, GgmlType type, const std::vector<int64_t>& ne,
                                        uint64_t* nbytes) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return absl::AlreadyExistsError(absl::StrCat("duplicate tensor name '", name, "'"));
  }
  SPECD_ASSIGN_OR_RETURN(*nbytes, TensorBytes(name, static_cast<uint32_t>(type), ne));
  return absl::OkStatus();
}

absl::Status GgufWriter::AddTensor(const std::string& name, GgmlType type, std::vector<int64_t> ne, const void* data,
                                   size_t nbytes) {
  uint64_t want = 0;
  SPECD_RETURN_IF_ERROR(CheckNewTensor(name, type, ne, &want));
  if (nbytes != want) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': ", nbytes, " bytes given, but ",
                                                   Sv(TypeName(type)), " [", absl::StrJoin(ne, ", "), "] needs ", want));
  }
  if (data == nullptr) return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': null data"));
  T t{name, type, std::move(ne), want, {}, nullptr};
  const auto* p = static_cast<const uint8_t*>(data);
  t.data.assign(p, p + nbytes);
  tensors_.push_back(std::move(t));
  return absl::OkStatus();
}

absl::Status GgufWriter::AddTensorF32(const std::string& name, std::vector<int64_t> ne, const float* data) {
  SPECD_ASSIGN_OR_RETURN(const uint64_t nbytes, TensorBytes(name, static_cast<uint32_t>(GgmlType::F32), ne));
  return AddTensor(name, GgmlType::F32, std::move(ne), data, nbytes);
}

absl::Status GgufWriter::AddTensorLazy(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                                       TensorFill fill) {
  uint64_t nbytes = 0;
  SPECD_RETURN_IF_ERROR(CheckNewTensor(name, type, ne, &nbytes));
  if (!fill) return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': no fill function"));
  tensors_.push_back(T{name, type, std::move(ne), nbytes, {}, std::move(fill)});
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> GgufWriter::Header() const {
  if (!IsPow2(alignment_)) {
    return absl::InvalidArgumentError(absl::StrCat("alignment ", alignment_, " is not a nonzero power of two"));
  }
  for (const auto& [key, v] : kv_) {
    if (key == kAlignmentKey && v.type != GgufValueType::UINT32) {
      return absl::InvalidArgumentError(absl::StrCat(kAlignmentKey, " must be a UINT32, not ", Sv(GgufValueTypeName(v.type))));
    }
  }
  std::vector<uint8_t> buf;
  Out o(&buf);
  o.Put<uint32_t>(kGgufMagic);
  o.Put<uint32_t>(kGgufVersion);
  o.Put<uint64_t>(tensors_.size());
  o.Put<uint64_t>(kv_.size());
  for (const auto& [key, v] : kv_) {
    o.Str(key);
    SPECD_RETURN_IF_ERROR(Prefixed(PutValue(o, v), absl::StrCat("key '", key, "': ")));
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    o.Str(t.name);
    o.Put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) o.Put<uint64_t>(static_cast<uint64_t>(d));
    o.Put<uint32_t>(static_cast<uint32_t>(t.type));
    o.Put<uint64_t>(offset);
    offset = AlignUp(offset + t.nbytes, alignment_);
  }
  o.PadTo(alignment_);
  return buf;
}

size_t GgufWriter::ChunkSize(size_t i) const {
  // Every tensor, the last one included, is padded (as gguf-py and ggml do).
  return AlignUp(tensors_[i].nbytes, alignment_);
}

absl::Status GgufWriter::FillChunk(size_t i, uint8_t* dst) const {
  const T& t = tensors_[i];
  if (t.fill) {
    SPECD_RETURN_IF_ERROR(Prefixed(t.fill(dst), absl::StrCat("tensor '", t.name, "': ")));
  } else {
    std::memcpy(dst, t.data.data(), t.nbytes);
  }
  std::memset(dst + t.nbytes, 0, ChunkSize(i) - t.nbytes);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> GgufWriter::Serialize() const {
  SPECD_ASSIGN_OR_RETURN(std::vector<uint8_t> buf, Header());
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const size_t at = buf.size();
    buf.resize(at + ChunkSize(i));
    SPECD_RETURN_IF_ERROR(FillChunk(i, buf.data() + at));
  }
  return buf;
}

absl::Status GgufWriter::WriteFile(const std::string& path, bool sync) const {
  // Everything that can be checked before the first byte is.
  SPECD_ASSIGN_OR_RETURN(std::vector<uint8_t> header, Header());
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::UnavailableError(absl::StrCat(tmp, ": cannot create: ", std::strerror(errno)));
  const auto discard = [&](absl::Status st) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return st;
  };
  const auto io_error = [&](absl::string_view what, int err) {
    return discard(absl::UnavailableError(absl::StrCat(tmp, ": ", what, ": ", std::strerror(err))));
  };
  // The file is mapped and each tensor produced in place: no buffer and no
  // copy, and the page faults (the kernel zeroes each new page) are taken by
  // the threads that fill the tensor, not by one writer thread.
  uint64_t total = header.size();
  for (size_t i = 0; i < tensors_.size(); ++i) total += ChunkSize(i);
  // Reserved up front: a full disk is an error here, never a SIGBUS later.
  if (const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(total)); err != 0) {
    return io_error(absl::StrCat("cannot reserve ", total, " bytes"), err);
  }
  void* map = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return io_error("mmap failed", errno);
  auto* base = static_cast<uint8_t*>(map);
  std::memcpy(base, header.data(), header.size());
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uint64_t off = header.size(), done = 0;  // [0, done): pages already let go
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (absl::Status st = FillChunk(i, base + off); !st.ok()) {
      ::munmap(map, total);
      return discard(st);
    }
    off += ChunkSize(i);
    // Let go of the finished pages, so the process holds about one tensor:
    // the data stays in the page cache (dirty, written back by the kernel;
    // with `sync`, starting now rather than at the fsync).
    const uint64_t upto = off / page * page;
    if (upto > done) {
      if (sync) {
        ::sync_file_range(fd, static_cast<off_t>(done), static_cast<off_t>(upto - done), SYNC_FILE_RANGE_WRITE);
      }
      ::madvise(base + done, upto - done, MADV_DONTNEED);
      done = upto;
    }
  }
  ::munmap(map, total);
  // fsync before rename so a crash cannot leave a complete name on partial data.
  if (sync && ::fsync(fd) != 0) return io_error("fsync failed", errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return absl::UnavailableError(absl::StrCat(tmp, ": close failed: ", std::strerror(err)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot rename ", tmp, " to ", path, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace specd
