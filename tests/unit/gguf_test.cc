// GGUF reader/writer: round trips, every malformed-file case the reader must
// reject (status code + message), truncation at every byte, and a cross-check
// against the format's own Python implementation (PyPI gguf).
#include "common/gguf/gguf.h"

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_util.h"

namespace specd {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// ---------------------------------------------------------------------------
// Helpers

std::vector<uint8_t> Serialize(const GgufWriter& w) {
  auto b = w.Serialize();
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *std::move(b) : std::vector<uint8_t>{};
}

absl::StatusOr<std::unique_ptr<GgufFile>> Parse(const std::vector<uint8_t>& b) {
  return GgufFile::FromBuffer(b.data(), b.size(), "t.gguf");
}

std::vector<uint8_t> Bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

// Offset just past the first encoded gguf string equal to `s` (u64 length + bytes).
size_t After(const std::vector<uint8_t>& b, const std::string& s) {
  std::string enc(8, '\0');
  const uint64_t n = s.size();
  std::memcpy(enc.data(), &n, 8);
  enc += s;
  const std::string hay(b.begin(), b.end());
  const size_t pos = hay.find(enc);
  EXPECT_NE(pos, std::string::npos) << "string '" << s << "' not found";
  return pos == std::string::npos ? 0 : pos + enc.size();
}

template <typename T>
void Poke(std::vector<uint8_t>& b, size_t off, T v) {
  ASSERT_LE(off + sizeof(T), b.size());
  std::memcpy(b.data() + off, &v, sizeof(T));
}

template <typename T>
T Peek(const std::vector<uint8_t>& b, size_t off) {
  T v{};
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

// Where the fields of a tensor info live, found by the tensor's name.
struct InfoAt {
  size_t n_dims, dims, type, offset;
};
InfoAt TensorInfoAt(const std::vector<uint8_t>& b, const std::string& name) {
  InfoAt a;
  a.n_dims = After(b, name);
  const uint32_t nd = Peek<uint32_t>(b, a.n_dims);
  a.dims = a.n_dims + 4;
  a.type = a.dims + 8 * nd;
  a.offset = a.type + 4;
  return a;
}

// Raw little-endian file builder for layouts the writer refuses to produce.
struct Raw {
  std::vector<uint8_t> b;
  template <typename T>
  Raw& Put(T v) {
    const size_t n = b.size();
    b.resize(n + sizeof(T));
    std::memcpy(b.data() + n, &v, sizeof(T));
    return *this;
  }
  Raw& Str(const std::string& s) {
    Put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Raw& Header(uint64_t n_tensors, uint64_t n_kv) {
    return Put<uint32_t>(kGgufMagic).Put<uint32_t>(3).Put<uint64_t>(n_tensors).Put<uint64_t>(n_kv);
  }
  Raw& PadTo(size_t a) {
    b.resize((b.size() + a - 1) / a * a, 0);
    return *this;
  }
};

// A small file exercising every kind of field; its last tensor ends exactly at
// an alignment boundary so every truncation cuts into something required.
GgufWriter SmallWriter() {
  GgufWriter w;
  w.Set("general.architecture", GgufValue::Str("llama"));
  w.Set("llama.block_count", GgufValue::U32(2));
  w.Set("a.i8", GgufValue::I8(-3));
  w.Set("a.f32", GgufValue::F32(0.5f));
  w.Set("a.bool", GgufValue::Bool(true));
  w.Set("a.strs", GgufValue::StrArray({"x", "yz"}));
  w.Set("a.i32s", GgufValue::I32Array({1, -1}));
  const std::vector<float> f(8, 1.5f);
  EXPECT_TRUE(w.AddTensorF32("w0", {4, 2}, f.data()).ok());
  const auto q = Bytes(34, 1);
  EXPECT_TRUE(w.AddTensor("q0", GgmlType::Q8_0, {32}, q.data(), q.size()).ok());
  const auto last = Bytes(32, 9);
  EXPECT_TRUE(w.AddTensor("w1", GgmlType::F32, {8}, last.data(), last.size()).ok());
  return w;
}

// Two F32 tensors "ta" and "tb" (64 bytes each) for the tensor-table cases.
std::vector<uint8_t> TwoTensorFile() {
  GgufWriter w;
  w.Set("k", GgufValue::U32(1));
  const std::vector<float> d(16, 2.0f);
  EXPECT_TRUE(w.AddTensorF32("ta", {16}, d.data()).ok());
  EXPECT_TRUE(w.AddTensorF32("tb", {8, 2}, d.data()).ok());
  return Serialize(w);
}

#define EXPECT_GGUF_ERROR(expr, want_code, substr)                            \
  do {                                                                        \
    auto r_ = (expr);                                                         \
    ASSERT_FALSE(r_.ok()) << "parsed a bad file";                             \
    EXPECT_EQ(r_.status().code(), want_code) << r_.status();                  \
    EXPECT_THAT(std::string(r_.status().message()), HasSubstr(substr));       \
    EXPECT_THAT(std::string(r_.status().message()), StartsWith("t.gguf: "));  \
  } while (0)

// ---------------------------------------------------------------------------
// Round trips

TEST(GgufRoundTrip, EveryMetadataType) {
  GgufWriter w;
  std::vector<std::pair<std::string, GgufValue>> want = {
      {"u8", GgufValue::U8(255)},
      {"i8", GgufValue::I8(-128)},
      {"u16", GgufValue::U16(65535)},
      {"i16", GgufValue::I16(-32768)},
      {"u32", GgufValue::U32(4294967295u)},
      {"i32", GgufValue::I32(std::numeric_limits<int32_t>::min())},
      {"f32", GgufValue::F32(-1.25f)},
      {"bool_t", GgufValue::Bool(true)},
      {"bool_f", GgufValue::Bool(false)},
      {"str", GgufValue::Str("h\xc3\xa9llo \"q\" \n")},
      {"str_empty", GgufValue::Str("")},
      {"u64", GgufValue::U64(std::numeric_limits<uint64_t>::max())},
      {"i64", GgufValue::I64(std::numeric_limits<int64_t>::min())},
      {"f64", GgufValue::F64(3.141592653589793)},
      {"arr.str", GgufValue::StrArray({"a", "", "\xe4\xb8\x96", std::string(300, 'z')})},
      {"arr.u8", GgufValue::UIntArray(GgufValueType::UINT8, {0, 1, 255})},
      {"arr.i8", GgufValue::IntArray(GgufValueType::INT8, {-128, 0, 127})},
      {"arr.u16", GgufValue::UIntArray(GgufValueType::UINT16, {65535})},
      {"arr.i16", GgufValue::IntArray(GgufValueType::INT16, {-32768, 32767})},
      {"arr.u32", GgufValue::UIntArray(GgufValueType::UINT32, {7, 4294967295u})},
      {"arr.i32", GgufValue::I32Array({1, -2, 3})},
      {"arr.u64", GgufValue::UIntArray(GgufValueType::UINT64, {0, ~0ull})},
      {"arr.i64", GgufValue::IntArray(GgufValueType::INT64, {std::numeric_limits<int64_t>::min(), 5})},
      {"arr.f32", GgufValue::F32Array({0.5f, -2.0f, 1e-3f})},
      {"arr.f64", GgufValue::FloatArray(GgufValueType::FLOAT64, {1e-300, -0.1})},
      {"arr.bool", GgufValue::BoolArray({true, false, true})},
      {"arr.empty_str", GgufValue::StrArray({})},
      {"arr.empty_u32", GgufValue::UIntArray(GgufValueType::UINT32, {})},
  };
  for (const auto& [k, v] : want) w.Set(k, v);
  w.Set("u8", GgufValue::U8(255));  // replacing keeps the original position
  const auto buf = Serialize(w);
  auto f = Parse(buf);
  ASSERT_TRUE(f.ok()) << f.status();
  const auto& got = (*f)->metadata();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_TRUE(got[i].second == want[i].second)
        << want[i].first << ": got " << got[i].second.ToString() << ", want " << want[i].second.ToString();
  }
  EXPECT_EQ((*f)->version(), 3u);
  EXPECT_EQ((*f)->alignment(), 32u);
  EXPECT_FALSE((*f)->Has("general.alignment"));
  EXPECT_TRUE((*f)->tensors().empty());
  EXPECT_EQ((*f)->Find("arr.str")->ArraySize(), 4u);
  EXPECT_EQ((*f)->Find("arr.empty_u32")->ArraySize(), 0u);
  EXPECT_EQ((*f)->Find("arr.i32")->ToString(), "[1, -2, 3]");
  EXPECT_EQ((*f)->Find("arr.bool")->ToString(2), "[true, false, ... (3 items)]");
  EXPECT_EQ((*f)->Find("str_empty")->ToString(), "\"\"");
}

TEST(GgufRoundTrip, TensorsAndData) {
  GgufWriter w;
  w.Set("general.architecture", GgufValue::Str("llama"));
  std::vector<float> f32(3 * 5);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = static_cast<float>(i) * 0.5f;
  ASSERT_TRUE(w.AddTensorF32("a.f32", {5, 3}, f32.data()).ok());
  const auto f16 = Bytes(2 * 7, 3);
  ASSERT_TRUE(w.AddTensor("b.f16", GgmlType::F16, {7}, f16.data(), f16.size()).ok());
  const auto q4 = Bytes(18 * 2 * 2 * 3, 5);  // Q4_0 [64, 2, 3]: 2 blocks per row, 6 rows
  ASSERT_TRUE(w.AddTensor("c.q4_0", GgmlType::Q4_0, {64, 2, 3}, q4.data(), q4.size()).ok());
  const auto q4k = Bytes(144 * 2, 7);  // Q4_K [256, 1, 1, 2]
  ASSERT_TRUE(w.AddTensor("d.q4_k", GgmlType::Q4_K, {256, 1, 1, 2}, q4k.data(), q4k.size()).ok());
  const auto buf = Serialize(w);
  auto r = Parse(buf);
  ASSERT_TRUE(r.ok()) << r.status();
  const GgufFile& f = **r;
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  struct Want {
    const char* name;
    GgmlType type;
    std::vector<int64_t> ne;
    const uint8_t* data;
    size_t nbytes;
  };
  const Want want[] = {
      {"a.f32", GgmlType::F32, {5, 3}, reinterpret_cast<const uint8_t*>(f32.data()), 60},
      {"b.f16", GgmlType::F16, {7}, f16.data(), f16.size()},
      {"c.q4_0", GgmlType::Q4_0, {64, 2, 3}, q4.data(), q4.size()},
      {"d.q4_k", GgmlType::Q4_K, {256, 1, 1, 2}, q4k.data(), q4k.size()},
  };
  for (size_t i = 0; i < 4; ++i) {
    const GgufTensorInfo& t = f.tensors()[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, want[i].name);
    EXPECT_EQ(t.type, want[i].type);
    EXPECT_EQ(t.ne, want[i].ne);
    EXPECT_EQ(t.nbytes, want[i].nbytes);
    EXPECT_EQ(t.nbytes, RowBytes(t.type, t.ne[0]) * static_cast<size_t>(t.rows()));
    EXPECT_EQ(t.offset % 32, 0u);
    EXPECT_EQ(t.data, buf.data() + f.data_offset() + t.offset);
    EXPECT_EQ(std::memcmp(t.data, want[i].data, t.nbytes), 0);
    EXPECT_EQ(f.FindTensor(want[i].name), &t);
  }
  EXPECT_EQ(f.tensors()[2].nelements(), 64 * 2 * 3);
  EXPECT_EQ(f.tensors()[2].rows(), 6);
  EXPECT_EQ(f.FindTensor("nope"), nullptr);
}

TEST(GgufRoundTrip, Alignment64) {
  GgufWriter w;
  w.Set("first", GgufValue::U32(1));
  w.SetAlignment(64);
  w.Set("last", GgufValue::U32(2));
  const auto d = Bytes(20, 1);  // I8 [20]: 20 bytes, so padding matters
  ASSERT_TRUE(w.AddTensor("x", GgmlType::I8, {20}, d.data(), d.size()).ok());
  ASSERT_TRUE(w.AddTensor("y", GgmlType::I8, {20}, d.data(), d.size()).ok());
  const auto buf = Serialize(w);
  auto f = Parse(buf);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->alignment(), 64u);
  const GgufValue* a = (*f)->Find("general.alignment");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->type, GgufValueType::UINT32);
  EXPECT_EQ((*f)->metadata()[1].first, "general.alignment");  // in insertion order
  EXPECT_EQ((*f)->data_offset() % 64, 0u);
  EXPECT_EQ((*f)->tensors()[0].offset, 0u);
  EXPECT_EQ((*f)->tensors()[1].offset, 64u);
  EXPECT_EQ(buf.size() % 64, 0u);  // the last tensor is padded too

  // Set("general.alignment", U32(..)) is the same as SetAlignment; back to 32 drops the key.
  GgufWriter w2;
  w2.Set("general.alignment", GgufValue::U32(128));
  ASSERT_TRUE(w2.AddTensor("x", GgmlType::I8, {20}, d.data(), d.size()).ok());
  auto f2 = Parse(Serialize(w2));
  ASSERT_TRUE(f2.ok()) << f2.status();
  EXPECT_EQ((*f2)->alignment(), 128u);
  EXPECT_EQ((*f2)->data_offset() % 128, 0u);
  w2.SetAlignment(32);
  auto f3 = Parse(Serialize(w2));
  ASSERT_TRUE(f3.ok()) << f3.status();
  EXPECT_FALSE((*f3)->Has("general.alignment"));
}

TEST(GgufRoundTrip, WriteFileAndOpen) {
  testing::TempDir dir;
  const std::string path = dir.File("m.gguf");
  GgufWriter w = SmallWriter();
  ASSERT_TRUE(w.WriteFile(path).ok());
  EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0) << "temp file left behind";
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->path(), path);
  EXPECT_EQ((*f)->file_size(), Serialize(w).size());
  EXPECT_EQ(*(*f)->GetString("general.architecture"), "llama");
  ASSERT_NE((*f)->FindTensor("w1"), nullptr);
  EXPECT_EQ((*f)->FindTensor("w1")->data[0], Bytes(32, 9)[0]);

  auto missing = GgufFile::Open(dir.File("nope.gguf"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("nope.gguf"));

  const std::string empty = dir.File("empty.gguf");
  std::ofstream(empty).close();
  auto e = GgufFile::Open(empty);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("empty.gguf: truncated file"));

  auto d = GgufFile::Open(dir.path());
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("not a regular file"));

  // A failed write leaves neither the target nor the temp file.
  EXPECT_FALSE(w.WriteFile(dir.File("no/such/dir.gguf")).ok());
}

// Lazy tensors (bytes produced while the file is written, one tensor in
// memory at a time) give the same file as copied-in ones, in memory and on
// disk; a fill that fails leaves no file behind.
TEST(GgufRoundTrip, LazyTensorsWriteTheSameBytes) {
  testing::TempDir dir;
  GgufWriter eager = SmallWriter();
  GgufWriter lazy;
  const std::vector<uint8_t> want = Serialize(eager);
  auto parsed = Parse(want);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  for (const auto& [k, v] : (*parsed)->metadata()) lazy.Set(k, v);
  const std::vector<float> f(8, 1.5f);
  ASSERT_TRUE(lazy.AddTensorLazy("w0", GgmlType::F32, {4, 2}, [&](uint8_t* dst) {
    std::memcpy(dst, f.data(), 32);
    return absl::OkStatus();
  }).ok());
  const auto q = Bytes(34, 1);
  ASSERT_TRUE(lazy.AddTensor("q0", GgmlType::Q8_0, {32}, q.data(), q.size()).ok());  // mixed with a copied one
  const auto last = Bytes(32, 9);
  ASSERT_TRUE(lazy.AddTensorLazy("w1", GgmlType::F32, {8}, [&](uint8_t* dst) {
    std::memcpy(dst, last.data(), last.size());
    return absl::OkStatus();
  }).ok());
  EXPECT_EQ(Serialize(lazy), want);
  ASSERT_TRUE(lazy.WriteFile(dir.File("lazy.gguf")).ok());
  std::ifstream in(dir.File("lazy.gguf"), std::ios::binary);
  const std::vector<uint8_t> disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(disk, want);

  EXPECT_THAT(std::string(lazy.AddTensorLazy("w0", GgmlType::F32, {4}, [](uint8_t*) { return absl::OkStatus(); })
                              .message()),
              HasSubstr("duplicate tensor name 'w0'"));
  EXPECT_THAT(std::string(lazy.AddTensorLazy("nofill", GgmlType::F32, {4}, nullptr).message()),
              HasSubstr("no fill function"));
  ASSERT_TRUE(lazy.AddTensorLazy("bad", GgmlType::F32, {4}, [](uint8_t*) {
    return absl::InternalError("generator broke");
  }).ok());
  const std::string path = dir.File("bad.gguf");
  const absl::Status st = lazy.WriteFile(path);
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(st.message()), HasSubstr("tensor 'bad': generator broke"));
  EXPECT_NE(access(path.c_str(), F_OK), 0) << "a failed write must leave no file";
  EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0) << "temp file left behind";
  EXPECT_FALSE(lazy.Serialize().ok());
}

TEST(GgufRoundTrip, NoTensorsAndTrailingBytes) {
  GgufWriter w;
  w.Set("k", GgufValue::Str("v"));
  auto buf = Serialize(w);
  ASSERT_TRUE(Parse(buf).ok());
  // Extra bytes after the data are not the reader's business.
  buf.resize(buf.size() + 100, 0xab);
  ASSERT_TRUE(Parse(buf).ok());
  // A header-only file may also end right after its metadata (no padding).
  Raw r;
  r.Header(0, 1).Str("k").Put<uint32_t>(4).Put<uint32_t>(7);
  auto f = Parse(r.b);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*(*f)->GetUInt("k"), 7u);
}

// ---------------------------------------------------------------------------
// Writer validation

TEST(GgufWriterTest, AddTensorValidates) {
  GgufWriter w;
  const auto d = Bytes(256, 0);
  auto s = w.AddTensor("q", GgmlType::Q8_0, {32}, d.data(), 33);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("33 bytes given"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("needs 34"));
  s = w.AddTensor("q", GgmlType::Q8_0, {33}, d.data(), 34);
  EXPECT_THAT(std::string(s.message()), HasSubstr("not a multiple of the Q8_0 block size 32"));
  s = w.AddTensor("q", GgmlType::F32, {}, d.data(), 4);
  EXPECT_THAT(std::string(s.message()), HasSubstr("n_dims 0"));
  s = w.AddTensor("q", GgmlType::F32, {1, 1, 1, 1, 1}, d.data(), 4);
  EXPECT_THAT(std::string(s.message()), HasSubstr("n_dims 5"));
  s = w.AddTensor("q", GgmlType::F32, {4, 0}, d.data(), 0);
  EXPECT_THAT(std::string(s.message()), HasSubstr("dim 1 = 0"));
  s = w.AddTensor("q", GgmlType::F32, {1ll << 40, 1ll << 40}, d.data(), 4);
  EXPECT_THAT(std::string(s.message()), HasSubstr("element count overflows"));
  s = w.AddTensor("q", static_cast<GgmlType>(99), {4}, d.data(), 4);
  EXPECT_THAT(std::string(s.message()), HasSubstr("unknown ggml type 99"));
  s = w.AddTensor("q", GgmlType::F32, {4}, nullptr, 16);
  EXPECT_THAT(std::string(s.message()), HasSubstr("null data"));
  ASSERT_TRUE(w.AddTensor("q", GgmlType::F32, {4}, d.data(), 16).ok());
  s = w.AddTensor("q", GgmlType::F32, {4}, d.data(), 16);
  EXPECT_THAT(std::string(s.message()), HasSubstr("duplicate tensor name 'q'"));
}

TEST(GgufWriterTest, SerializeValidates) {
  {
    GgufWriter w;
    w.SetAlignment(48);
    auto b = w.Serialize();
    ASSERT_FALSE(b.ok());
    EXPECT_THAT(std::string(b.status().message()), HasSubstr("alignment 48 is not a nonzero power of two"));
  }
  {
    GgufWriter w;
    w.Set("general.alignment", GgufValue::U64(64));
    auto b = w.Serialize();
    ASSERT_FALSE(b.ok());
    EXPECT_THAT(std::string(b.status().message()), HasSubstr("must be a UINT32"));
  }
  {
    GgufWriter w;
    GgufValue v = GgufValue::U8(0);
    v.scalar = uint64_t{300};
    w.Set("small", v);
    auto b = w.Serialize();
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_THAT(std::string(b.status().message()), HasSubstr("key 'small': 300 does not fit UINT8"));
  }
  {
    GgufWriter w;
    GgufValue v = GgufValue::U32(1);
    v.scalar = std::string("oops");
    w.Set("mixed", v);
    auto b = w.Serialize();
    ASSERT_FALSE(b.ok());
    EXPECT_THAT(std::string(b.status().message()), HasSubstr("does not match its declared type UINT32"));
  }
  {
    GgufWriter w;
    GgufValue v;
    v.type = GgufValueType::ARRAY;
    v.elem_type = GgufValueType::ARRAY;
    w.Set("nested", v);
    auto b = w.Serialize();
    ASSERT_FALSE(b.ok());
    EXPECT_THAT(std::string(b.status().message()), HasSubstr("arrays of arrays cannot be written"));
  }
}

// ---------------------------------------------------------------------------
// Getters

TEST(GgufGetters, TypesAndErrors) {
  GgufWriter w;
  w.Set("u8", GgufValue::U8(7));
  w.Set("i32neg", GgufValue::I32(-5));
  w.Set("i16", GgufValue::I16(12));
  w.Set("u64big", GgufValue::U64(~0ull));
  w.Set("f32", GgufValue::F32(0.25f));
  w.Set("f64", GgufValue::F64(1e-6));
  w.Set("b", GgufValue::Bool(true));
  w.Set("s", GgufValue::Str("hi"));
  w.Set("ai", GgufValue::I32Array({1, 2}));
  auto r = Parse(Serialize(w));
  ASSERT_TRUE(r.ok()) << r.status();
  const GgufFile& f = **r;

  EXPECT_EQ(*f.GetUInt("u8"), 7u);
  EXPECT_EQ(*f.GetUInt("i16"), 12u);  // any non-negative integer type
  EXPECT_EQ(*f.GetUInt("u64big"), ~0ull);
  EXPECT_EQ(*f.GetInt("i32neg"), -5);
  EXPECT_EQ(*f.GetInt("u8"), 7);
  EXPECT_EQ(*f.GetFloat("f32"), 0.25);
  EXPECT_EQ(*f.GetFloat("f64"), 1e-6);
  EXPECT_EQ(*f.GetFloat("i32neg"), -5.0);  // integers convert
  EXPECT_TRUE(*f.GetBool("b"));
  EXPECT_EQ(*f.GetString("s"), "hi");
  auto arr = f.GetArray("ai", GgufValueType::INT32);
  ASSERT_TRUE(arr.ok());
  EXPECT_EQ((*arr)->arr_int, (std::vector<int64_t>{1, 2}));

  auto e = f.GetUInt("llama.block_count");
  EXPECT_EQ(e.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(e.status().message(), "t.gguf: required key 'llama.block_count' is missing");
  e = f.GetUInt("s");
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e.status().message(), "t.gguf: key 's' has type STRING, expected an integer");
  e = f.GetUInt("f32");
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("has type FLOAT32, expected an integer"));
  e = f.GetUInt("i32neg");
  EXPECT_EQ(e.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("'i32neg' is -5, expected a non-negative integer"));
  auto ei = f.GetInt("u64big");
  EXPECT_EQ(ei.status().code(), absl::StatusCode::kOutOfRange);
  auto ef = f.GetFloat("s");
  EXPECT_THAT(std::string(ef.status().message()), HasSubstr("key 's' has type STRING, expected a number"));
  auto eb = f.GetBool("u8");
  EXPECT_THAT(std::string(eb.status().message()), HasSubstr("key 'u8' has type UINT8, expected BOOL"));
  auto es = f.GetString("b");
  EXPECT_THAT(std::string(es.status().message()), HasSubstr("key 'b' has type BOOL, expected STRING"));
  auto ea = f.GetArray("ai", GgufValueType::UINT32);
  EXPECT_EQ(ea.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ea.status().message()),
              HasSubstr("key 'ai' has type ARRAY of INT32, expected ARRAY of UINT32"));
  ea = f.GetArray("s", GgufValueType::STRING);
  EXPECT_THAT(std::string(ea.status().message()), HasSubstr("has type STRING, expected ARRAY of STRING"));

  EXPECT_EQ(*f.GetUIntOr("absent", 42), 42u);
  EXPECT_EQ(*f.GetUIntOr("u8", 42), 7u);
  EXPECT_EQ(*f.GetFloatOr("absent", 1.5), 1.5);
  EXPECT_EQ(*f.GetStringOr("absent", "d"), "d");
  EXPECT_FALSE(f.GetStringOr("u8", "d").ok());  // present with the wrong type is still an error
  EXPECT_FALSE(f.GetUIntOr("s", 1).ok());
  EXPECT_FALSE(f.GetFloatOr("s", 1).ok());
}

// ---------------------------------------------------------------------------
// Malformed files

TEST(GgufBadFile, Magic) {
  auto b = Serialize(SmallWriter());
  b[0] = 'X';
  EXPECT_GGUF_ERROR(Parse(b), absl::StatusCode::kInvalidArgument, "bad magic");
}

TEST(GgufBadFile, Version) {
  auto b = Serialize(SmallWriter());
  for (uint32_t v : {1u, 2u, 4u}) {
    Poke<uint32_t>(b, 4, v);
    EXPECT_GGUF_ERROR(Parse(b), absl::StatusCode::kUnimplemented,
                      "unsupported GGUF version " + std::to_string(v) + " (specd reads v3)");
  }
  Poke<uint32_t>(b, 4, 0x03000000);  // a big-endian v3 file
  EXPECT_GGUF_ERROR(Parse(b), absl::StatusCode::kUnimplemented, "big-endian");
}

TEST(GgufBadFile, TruncatedAtEveryByte) {
  const auto full = Serialize(SmallWriter());
  ASSERT_TRUE(Parse(full).ok());
  ASSERT_LT(full.size(), 1024u);
  for (size_t n = 0; n < full.size(); ++n) {
    // A fresh allocation of exactly n bytes so ASan catches any overread.
    std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<ptrdiff_t>(n));
    cut.shrink_to_fit();
    auto r = Parse(cut);
    ASSERT_FALSE(r.ok()) << "accepted a file truncated to " << n << " of " << full.size() << " bytes";
    const auto code = r.status().code();
    EXPECT_TRUE(code == absl::StatusCode::kDataLoss || code == absl::StatusCode::kInvalidArgument)
        << n << ": " << r.status();
    EXPECT_THAT(std::string(r.status().message()), StartsWith("t.gguf: "));
  }
  // Spot checks of the message at a few places.
  auto at = [&](size_t n) {
    return GgufFile::FromBuffer(full.data(), n, "t.gguf");
  };
  EXPECT_GGUF_ERROR(at(2), absl::StatusCode::kDataLoss, "truncated file: magic at offset 0 needs 4 bytes, only 2");
  EXPECT_GGUF_ERROR(at(full.size() - 1), absl::StatusCode::kDataLoss,
                    "tensor 'w1' data [offset " + std::to_string(full.size() - 32) +
                        ", 32 bytes) runs past the end of the file (" + std::to_string(full.size() - 1) +
                        " bytes)");
  const size_t key_end = After(full, "a.strs");
  EXPECT_GGUF_ERROR(at(key_end + 2), absl::StatusCode::kDataLoss, "key 'a.strs': truncated file: value type");
}

TEST(GgufBadFile, AbsurdCounts) {
  auto b = Serialize(SmallWriter());
  auto c = b;
  Poke<uint64_t>(c, 8, 1ull << 40);
  EXPECT_GGUF_ERROR(Parse(c), absl::StatusCode::kInvalidArgument, "tensor_count 1099511627776 is more than");
  c = b;
  Poke<uint64_t>(c, 16, ~0ull);
  EXPECT_GGUF_ERROR(Parse(c), absl::StatusCode::kInvalidArgument, "metadata_kv_count 18446744073709551615");
}

TEST(GgufBadFile, HugeStringLength) {
  auto b = Serialize(SmallWriter());
  Poke<uint64_t>(b, 24, 1ull << 62);  // length of the first key
  EXPECT_GGUF_ERROR(Parse(b), absl::StatusCode::kDataLoss, "has length 4611686018427387904 but only");
  b = Serialize(SmallWriter());
  const size_t name = After(b, "w0") - 2 - 8;  // length of tensor name "w0"
  Poke<uint64_t>(b, name, ~0ull);
  EXPECT_GGUF_ERROR(Parse(b), absl::StatusCode::kDataLoss, "name of tensor 0");
  b = Serialize(SmallWriter());
  const size_t first_elem = After(b, "a.strs") + 4 + 4 + 8;  // type, elem type, count
  Poke<uint64_t>(b, first_elem, 1ull << 50);
  EXPECT_GGUF_ERROR(Parse(b), absl::StatusCode::kDataLoss, "key 'a.strs': truncated file: array string");
}

TEST(GgufBadFile, HugeArrayCount) {
  for (const char* key : {"a.strs", "a.i32s"}) {
    auto b = Serialize(SmallWriter());
    Poke<uint64_t>(b, After(b, key) + 8, 1ull << 60);
    EXPECT_GGUF_ERROR(Parse(b), absl::StatusCode::kDataLoss, std::string("key '") + key + "': truncated file: array count");
  }
}

TEST(GgufBadFile, DuplicateKey) {
  GgufWriter w;
  w.Set("dup.a", GgufValue::U32(1));
  w.Set("dup.b", GgufValue::U32(2));
  auto b = Serialize(w);
  b[After(b, "dup.b") - 1] = 'a';
  EXPECT_GGUF_ERROR(Parse(b), absl::StatusCode::kInvalidArgument, "duplicate metadata key 'dup.a'");
}

TEST(GgufBadFile, DuplicateTensorName) {
  auto b = TwoTensorFile();
  b[After(b, "tb") - 1] = 'a';
  EXPECT_GGUF_ERROR(Parse(b), absl::StatusCode::kInvalidArgument, "duplicate tensor name 'ta'");
}

TEST(GgufBadFile, UnknownValueType) {
  auto b = Serialize(SmallWriter());
  Poke<uint32_t>(b, After(b, "llama.block_count"), 13);
  EXPECT_GGUF_ERROR(Parse(b), absl::StatusCode::kInvalidArgument, "key 'llama.block_count': value type is unknown value type 13");
  b = Serialize(SmallWriter());
  Poke<uint32_t>(b, After(b, "a.i32s") + 4, 0xffffffff);
  EXPECT_GGUF_ERROR(Parse(b), absl::StatusCode::kInvalidArgument, "array element type is unknown value type 4294967295");
}

TEST(GgufBadFile, UnknownTensorType) {
  for (uint32_t id : {99u, 4u, 5u, 31u}) {  // 4, 5 and 31 were removed from ggml
    auto b = TwoTensorFile();
    Poke<uint32_t>(b, TensorInfoAt(b, "tb").type, id);
    EXPECT_GGUF_ERROR(Parse(b), absl::StatusCode::kInvalidArgument,
                      "tensor 'tb' has unknown ggml type " + std::to_string(id));
  }
}

TEST(GgufBadFile, BadDims) {
  auto b = TwoTensorFile();
  const InfoAt tb = TensorInfoAt(b, "tb");
  auto c = b;
  Poke<uint32_t>(c, tb.n_dims, 0);
  EXPECT_GGUF_ERROR(Parse(c), absl::StatusCode::kInvalidArgument, "tensor 'tb' has n_dims 0 (must be 1..4)");
  c = b;
  Poke<uint32_t>(c, tb.n_dims, 5);
  EXPECT_GGUF_ERROR(Parse(c), absl::StatusCode::kInvalidArgument, "tensor 'tb' has n_dims 5");
  c = b;
  Poke<uint64_t>(c, tb.dims + 8, 0);
  EXPECT_GGUF_ERROR(Parse(c), absl::StatusCode::kInvalidArgument, "tensor 'tb' has dim 1 = 0 (must be positive)");
  c = b;
  Poke<uint64_t>(c, tb.dims, ~0ull);  // -1 as int64
  EXPECT_GGUF_ERROR(Parse(c), absl::StatusCode::kInvalidArgument, "tensor 'tb' has dim 0 = -1");
  c = b;
  Poke<uint64_t>(c, tb.dims, 1ull << 62);
  Poke<uint64_t>(c, tb.dims + 8, 4);
  EXPECT_GGUF_ERROR(Parse(c), absl::StatusCode::kInvalidArgument, "tensor 'tb' element count overflows");
  c = b;
  // Fits int64 elements but not bytes: F32 [2^61, 1] is 2^63 bytes.
  Poke<uint64_t>(c, tb.dims, 1ull << 61);
  Poke<uint64_t>(c, tb.dims + 8, 2);
  EXPECT_GGUF_ERROR(Parse(c), absl::StatusCode::kInvalidArgument, "tensor 'tb' byte size overflows");
}

TEST(GgufBadFile, RowNotMultipleOfBlock) {
  GgufWriter w;
  const auto q = Bytes(34 * 2, 0);
  ASSERT_TRUE(w.AddTensor("q", GgmlType::Q8_0, {32, 2}, q.data(), q.size()).ok());
  auto b = Serialize(w);
  Poke<uint64_t>(b, TensorInfoAt(b, "q").dims, 33);
  EXPECT_GGUF_ERROR(Parse(b), absl::StatusCode::kInvalidArgument,
                    "tensor 'q' has row length 33, not a multiple of the Q8_0 block size 32");
}

TEST(GgufBadFile, TensorOffsets) {
  const auto b = TwoTensorFile();
  const InfoAt tb = TensorInfoAt(b, "tb");
  ASSERT_EQ(Peek<uint64_t>(b, tb.offset), 64u);
  auto c = b;
  Poke<uint64_t>(c, tb.offset, 65);
  EXPECT_GGUF_ERROR(Parse(c), absl::StatusCode::kInvalidArgument, "tensor 'tb' offset 65 is not a multiple of the alignment 32");
  c = b;
  Poke<uint64_t>(c, tb.offset, 96);  // [96, 160) past the data section of 128 bytes
  EXPECT_GGUF_ERROR(Parse(c), absl::StatusCode::kDataLoss, "tensor 'tb' data [offset");
  EXPECT_GGUF_ERROR(Parse(c), absl::StatusCode::kDataLoss, "runs past the end of the file (" + std::to_string(b.size()) + " bytes)");
  c = b;
  Poke<uint64_t>(c, tb.offset, ~0ull << 5);  // aligned, absurdly far
  EXPECT_GGUF_ERROR(Parse(c), absl::StatusCode::kDataLoss, "is past the end of the data section");
  c = b;
  Poke<uint64_t>(c, tb.dims + 8, 3);  // 96 bytes from offset 64
  EXPECT_GGUF_ERROR(Parse(c), absl::StatusCode::kDataLoss, "runs past the end of the file");
  c = b;
  Poke<uint64_t>(c, tb.offset, 32);  // [32, 96) overlaps ta's [0, 64)
  EXPECT_GGUF_ERROR(Parse(c), absl::StatusCode::kInvalidArgument,
                    "tensors 'ta' [offset 0, 64 bytes) and 'tb' [offset 32, 64 bytes) overlap");
  c = b;
  Poke<uint64_t>(c, tb.offset, 0);  // same start
  EXPECT_GGUF_ERROR(Parse(c), absl::StatusCode::kInvalidArgument, "overlap");
  c = b;  // out of order but disjoint is fine
  Poke<uint64_t>(c, TensorInfoAt(c, "ta").offset, 64);
  Poke<uint64_t>(c, tb.offset, 0);
  EXPECT_TRUE(Parse(c).ok());
}

TEST(GgufBadFile, Alignment) {
  GgufWriter w;
  w.SetAlignment(64);
  const auto d = Bytes(64, 0);
  ASSERT_TRUE(w.AddTensor("x", GgmlType::I8, {64}, d.data(), d.size()).ok());
  const auto b = Serialize(w);
  const size_t val = After(b, "general.alignment") + 4;
  for (uint32_t a : {0u, 48u, 3u}) {
    auto c = b;
    Poke<uint32_t>(c, val, a);
    EXPECT_GGUF_ERROR(Parse(c), absl::StatusCode::kInvalidArgument,
                      "general.alignment " + std::to_string(a) + " is not a nonzero power of two");
  }
  // Not a u32: as a u64 or a string.
  Raw r;
  r.Header(0, 1).Str("general.alignment").Put<uint32_t>(10).Put<uint64_t>(64);
  EXPECT_GGUF_ERROR(Parse(r.b), absl::StatusCode::kInvalidArgument, "general.alignment has type UINT64, expected UINT32");
  Raw s;
  s.Header(0, 1).Str("general.alignment").Put<uint32_t>(8).Str("64");
  EXPECT_GGUF_ERROR(Parse(s.b), absl::StatusCode::kInvalidArgument, "general.alignment has type STRING, expected UINT32");
  // A valid alignment that puts the data section past the end.
  auto c = b;
  Poke<uint32_t>(c, val, 1u << 20);
  EXPECT_GGUF_ERROR(Parse(c), absl::StatusCode::kDataLoss, "data section starts at 1048576, past the end");
}

TEST(GgufBadFile, NestedArrays) {
  // [[1, 2], [], [["a"]]]: read by skipping the contents.
  Raw r;
  r.Header(0, 2).Str("nested").Put<uint32_t>(9).Put<uint32_t>(9).Put<uint64_t>(3);
  r.Put<uint32_t>(5).Put<uint64_t>(2).Put<int32_t>(1).Put<int32_t>(2);
  r.Put<uint32_t>(4).Put<uint64_t>(0);
  r.Put<uint32_t>(9).Put<uint64_t>(1).Put<uint32_t>(8).Put<uint64_t>(1).Str("a");
  r.Str("after").Put<uint32_t>(0).Put<uint8_t>(9);
  auto f = Parse(r.b);
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufValue* v = (*f)->Find("nested");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->type, GgufValueType::ARRAY);
  EXPECT_EQ(v->elem_type, GgufValueType::ARRAY);
  EXPECT_EQ(v->ArraySize(), 3u);
  EXPECT_EQ(v->ToString(), "[3 nested arrays, not read]");
  EXPECT_EQ(*(*f)->GetUInt("after"), 9u);
  auto bad = (*f)->GetArray("nested", GgufValueType::INT32);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("has type ARRAY of ARRAY"));

  // Nested truncation and bad inner types are still caught.
  auto cut = r.b;
  cut.resize(cut.size() - 20);
  EXPECT_GGUF_ERROR(Parse(cut), absl::StatusCode::kDataLoss, "key 'nested': truncated file");
  Raw u;
  u.Header(0, 1).Str("n").Put<uint32_t>(9).Put<uint32_t>(9).Put<uint64_t>(1).Put<uint32_t>(77).Put<uint64_t>(0);
  EXPECT_GGUF_ERROR(Parse(u.b), absl::StatusCode::kInvalidArgument, "nested array element type is unknown value type 77");
  Raw big;
  big.Header(0, 1).Str("n").Put<uint32_t>(9).Put<uint32_t>(9).Put<uint64_t>(1).Put<uint32_t>(6).Put<uint64_t>(1ull << 61);
  EXPECT_GGUF_ERROR(Parse(big.b), absl::StatusCode::kDataLoss, "nested array count");

  // Too deep: 40 levels of single-element arrays.
  Raw deep;
  deep.Header(0, 1).Str("deep").Put<uint32_t>(9);
  for (int i = 0; i < 40; ++i) deep.Put<uint32_t>(9).Put<uint64_t>(1);
  deep.Put<uint32_t>(0).Put<uint64_t>(0);
  EXPECT_GGUF_ERROR(Parse(deep.b), absl::StatusCode::kInvalidArgument, "arrays nested more than 16 deep");
}

TEST(GgufBadFile, NullBufferAndGarbage) {
  EXPECT_GGUF_ERROR(GgufFile::FromBuffer(nullptr, 10, "t.gguf"), absl::StatusCode::kInvalidArgument, "null buffer");
  EXPECT_GGUF_ERROR(GgufFile::FromBuffer(nullptr, 0, "t.gguf"), absl::StatusCode::kDataLoss, "truncated file");
  // Deterministic pseudo-random corruption of a valid file: never crash.
  const auto full = Serialize(SmallWriter());
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int iter = 0; iter < 20000; ++iter) {
    auto c = full;
    for (int k = 0; k < 1 + iter % 4; ++k) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      c[x % c.size()] = static_cast<uint8_t>(x >> 32);
    }
    auto p = Parse(c);
    if (p.ok()) {
      for (const auto& t : (*p)->tensors()) {
        ASSERT_GE(t.data, c.data());
        ASSERT_LE(t.data + t.nbytes, c.data() + c.size());
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Cross-check with gguf-py

// Our reader's view in the schema of tests/python/gguf_roundtrip.py.
std::string DumpJson(const GgufFile& f) {
  using nlohmann::ordered_json;
  ordered_json meta = ordered_json::array();
  for (const auto& [key, v] : f.metadata()) {
    ordered_json m = {{"key", key}, {"type", GgufValueTypeName(v.type)}};
    auto scalar = [&](size_t i, GgufValueType t) -> ordered_json {
      switch (t) {
        case GgufValueType::STRING: return v.arr_str[i];
        case GgufValueType::BOOL: return static_cast<bool>(v.arr_bool[i]);
        case GgufValueType::FLOAT32:
        case GgufValueType::FLOAT64: return v.arr_float[i];
        case GgufValueType::UINT8:
        case GgufValueType::UINT16:
        case GgufValueType::UINT32:
        case GgufValueType::UINT64: return v.arr_uint[i];
        default: return v.arr_int[i];
      }
    };
    if (v.type == GgufValueType::ARRAY) {
      m["elem_type"] = GgufValueTypeName(v.elem_type);
      if (v.elem_type == GgufValueType::ARRAY) {
        m["count"] = v.ArraySize();
      } else {
        ordered_json values = ordered_json::array();
        for (size_t i = 0; i < v.ArraySize(); ++i) values.push_back(scalar(i, v.elem_type));
        m["value"] = values;
      }
    } else {
      std::visit([&](const auto& x) { m["value"] = x; }, v.scalar);
    }
    meta.push_back(m);
  }
  ordered_json tensors = ordered_json::array();
  static const char* kHex = "0123456789abcdef";
  for (const auto& t : f.tensors()) {
    std::string data;
    for (uint64_t i = 0; i < t.nbytes; ++i) {
      data += kHex[t.data[i] >> 4];
      data += kHex[t.data[i] & 15];
    }
    tensors.push_back({{"name", t.name}, {"type", TypeName(t.type)}, {"ne", t.ne}, {"offset", t.offset},
                       {"nbytes", t.nbytes}, {"data", data}});
  }
  const ordered_json j = {{"version", f.version()}, {"alignment", f.alignment()}, {"data_offset", f.data_offset()},
                          {"metadata", meta}, {"tensors", tensors}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string Script() { return testing::SourcePath("tests/python/gguf_roundtrip.py"); }

// Runs the script; stderr goes into `out` too so failures explain themselves.
int RunPy(const std::string& args, std::string* out) {
  return testing::RunCommand(testing::ShellQuote(testing::PythonPath()) + " " + testing::ShellQuote(Script()) + " " +
                                 args + " 2>&1",
                             out);
}

// Every metadata type, arrays, several tensor types and a non-default alignment.
GgufWriter CrossCheckWriter() {
  GgufWriter w;
  w.Set("general.architecture", GgufValue::Str("llama"));
  w.SetAlignment(64);
  w.Set("u8", GgufValue::U8(250));
  w.Set("i8", GgufValue::I8(-7));
  w.Set("u16", GgufValue::U16(60000));
  w.Set("i16", GgufValue::I16(-30000));
  w.Set("u32", GgufValue::U32(4000000000u));
  w.Set("i32", GgufValue::I32(-2000000000));
  w.Set("f32", GgufValue::F32(0.1f));
  w.Set("bool", GgufValue::Bool(false));
  w.Set("str", GgufValue::Str("tab\there \"quoted\" \xc3\xa9"));
  w.Set("u64", GgufValue::U64(18446744073709551615ull));
  w.Set("i64", GgufValue::I64(-9223372036854775807ll - 1));
  w.Set("f64", GgufValue::F64(-2.718281828459045));
  w.Set("arr.str", GgufValue::StrArray({"<s>", "</s>", "", "\xe2\x96\x81the"}));
  w.Set("arr.i32", GgufValue::I32Array({0, -1, 2147483647}));
  w.Set("arr.u8", GgufValue::UIntArray(GgufValueType::UINT8, {0, 255}));
  w.Set("arr.u64", GgufValue::UIntArray(GgufValueType::UINT64, {1, 18446744073709551615ull}));
  w.Set("arr.i16", GgufValue::IntArray(GgufValueType::INT16, {-5, 5}));
  w.Set("arr.f32", GgufValue::F32Array({0.25f, -3.5f, 1e-7f}));
  w.Set("arr.f64", GgufValue::FloatArray(GgufValueType::FLOAT64, {1e300, -0.3}));
  w.Set("arr.bool", GgufValue::BoolArray({false, true}));
  w.Set("arr.empty", GgufValue::UIntArray(GgufValueType::UINT32, {}));
  std::vector<float> f(12);
  for (size_t i = 0; i < f.size(); ++i) f[i] = 0.25f * static_cast<float>(i) - 1;
  EXPECT_TRUE(w.AddTensorF32("tok_embd.weight", {4, 3}, f.data()).ok());
  const auto q8 = Bytes(34 * 2, 11);
  EXPECT_TRUE(w.AddTensor("blk.0.q8", GgmlType::Q8_0, {64}, q8.data(), q8.size()).ok());
  const auto q4k = Bytes(144, 13);
  EXPECT_TRUE(w.AddTensor("blk.0.q4k", GgmlType::Q4_K, {256}, q4k.data(), q4k.size()).ok());
  const auto f16 = Bytes(2 * 6, 17);
  EXPECT_TRUE(w.AddTensor("norm.f16", GgmlType::F16, {3, 2}, f16.data(), f16.size()).ok());
  return w;
}

TEST(GgufPyRef, PythonReadsOurFile) {
  SPECD_REQUIRE_PYREF("gguf");
  testing::TempDir dir;
  const std::string path = dir.File("ours.gguf");
  GgufWriter w = CrossCheckWriter();
  ASSERT_TRUE(w.WriteFile(path).ok());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  const std::string want = dir.File("ours.json");
  std::ofstream(want) << DumpJson(**f);
  std::string out;
  const int rc = RunPy("compare " + testing::ShellQuote(path) + " " + testing::ShellQuote(want), &out);
  EXPECT_EQ(rc, 0) << "gguf-py disagrees with our reader on a file our writer wrote:\n"
                   << out << "\nours: " << DumpJson(**f);
  EXPECT_THAT(out, HasSubstr("\"alignment\": 64"));
  EXPECT_THAT(out, HasSubstr("\"name\": \"blk.0.q4k\", \"type\": \"Q4_K\", \"ne\": [256]"));
}

TEST(GgufPyRef, WeReadPythonFile) {
  SPECD_REQUIRE_PYREF("gguf");
  testing::TempDir dir;
  const std::string path = dir.File("py.gguf");
  std::string out;
  ASSERT_EQ(RunPy("write " + testing::ShellQuote(path), &out), 0) << out;
  auto r = GgufFile::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  const GgufFile& f = **r;

  // What tests/python/gguf_roundtrip.py writes.
  EXPECT_EQ(f.metadata()[0].first, "general.architecture");
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(*f.GetUInt("llama.block_count"), 2u);
  EXPECT_EQ(*f.GetUInt("t.u8"), 200u);
  EXPECT_EQ(*f.GetInt("t.i8"), -100);
  EXPECT_EQ(*f.GetUInt("t.u16"), 65535u);
  EXPECT_EQ(*f.GetInt("t.i16"), -32768);
  EXPECT_EQ(*f.GetInt("t.i32"), -123456);
  EXPECT_EQ(*f.GetFloat("t.f32"), 0.25);
  EXPECT_EQ(*f.GetUInt("t.u64"), (1ull << 63) + 5);
  EXPECT_EQ(*f.GetInt("t.i64"), -(1ll << 62));
  EXPECT_EQ(*f.GetFloat("t.f64"), 3.141592653589793);
  EXPECT_TRUE(*f.GetBool("t.bool"));
  EXPECT_EQ(*f.GetString("t.str"), "h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c");
  EXPECT_EQ((*f.GetArray("t.arr_str", GgufValueType::STRING))->arr_str,
            (std::vector<std::string>{"a", "bc", "", "\xc3\xbc"}));
  EXPECT_EQ((*f.GetArray("t.arr_i32", GgufValueType::INT32))->arr_int, (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ((*f.GetArray("t.arr_f32", GgufValueType::FLOAT32))->arr_float, (std::vector<double>{0.5, -1.25, 3.0}));
  EXPECT_EQ((*f.GetArray("t.arr_bool", GgufValueType::BOOL))->arr_bool, (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ((*f.GetArray("t.arr_u8", GgufValueType::UINT8))->arr_uint, (std::vector<uint64_t>{1, 2, 255}));
  EXPECT_EQ((*f.GetArray("t.arr_u64", GgufValueType::UINT64))->arr_uint, (std::vector<uint64_t>{0, ~0ull}));
  EXPECT_EQ((*f.GetArray("t.arr_f64", GgufValueType::FLOAT64))->arr_float, (std::vector<double>{1e-300, -2.5}));
  const GgufValue* nested = f.Find("t.nested");
  ASSERT_NE(nested, nullptr);
  EXPECT_EQ(nested->elem_type, GgufValueType::ARRAY);
  EXPECT_EQ(nested->ArraySize(), 2u);

  ASSERT_EQ(f.tensors().size(), 4u);
  const GgufTensorInfo* emb = f.FindTensor("tok_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, GgmlType::F32);
  EXPECT_EQ(emb->ne, (std::vector<int64_t>{16, 4}));
  for (int i = 0; i < 64; ++i) {
    float v;
    std::memcpy(&v, emb->data + 4 * i, 4);
    ASSERT_EQ(v, static_cast<float>(i));
  }
  const GgufTensorInfo* q8 = f.FindTensor("q8");
  ASSERT_NE(q8, nullptr);
  EXPECT_EQ(q8->type, GgmlType::Q8_0);
  EXPECT_EQ(q8->ne, (std::vector<int64_t>{64, 2}));
  EXPECT_EQ(q8->nbytes, 136u);
  for (int i = 0; i < 136; ++i) ASSERT_EQ(q8->data[i], i % 251);
  EXPECT_EQ(f.FindTensor("f16")->ne, (std::vector<int64_t>{8, 3}));
  EXPECT_EQ(f.FindTensor("i32")->type, GgmlType::I32);
  EXPECT_EQ(f.FindTensor("i32")->nbytes, 20u);
  for (const auto& t : f.tensors()) EXPECT_EQ(t.offset % 64, 0u) << t.name;

  // And every field agrees with gguf-py's own reading of the same file.
  const std::string want = dir.File("ours.json");
  std::ofstream(want) << DumpJson(f);
  ASSERT_EQ(RunPy("compare " + testing::ShellQuote(path) + " " + testing::ShellQuote(want), &out), 0)
      << out << "\nours: " << DumpJson(f);
}

}  // namespace
}  // namespace specd
