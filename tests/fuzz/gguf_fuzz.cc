// libFuzzer target for the GGUF reader. Whatever FromBuffer accepts must be
// safe to use in full: every metadata value and every byte of every tensor is
// touched (ASan flags anything outside the input), and the parsed file must
// survive a rewrite through GgufWriter and parse back the same.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/gguf/gguf.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "gguf_fuzz: invariant violated: %s\n", what);
    std::abort();
  }
}

uint64_t Touch(const specd::GgufFile& f) {
  uint64_t sum = f.version() + f.alignment() + f.data_offset() + f.file_size();
  for (const auto& [key, v] : f.metadata()) {
    Check(f.Find(key) == &v, "Find returns the entry");
    sum += key.size() + v.ArraySize() + v.ToString(4).size();
    // Every getter on every key: either a value or a clean error.
    if (auto u = f.GetUInt(key); u.ok()) sum += *u;
    if (auto i = f.GetInt(key); i.ok()) sum += static_cast<uint64_t>(*i);
    if (auto d = f.GetFloat(key); d.ok()) sum += static_cast<uint64_t>(*d != 0);
    if (auto b = f.GetBool(key); b.ok()) sum += *b;
    if (auto s = f.GetString(key); s.ok()) sum += s->size();
    if (v.type == specd::GgufValueType::ARRAY) {
      auto a = f.GetArray(key, v.elem_type);
      Check(a.ok() && *a == &v, "GetArray with the stored element type");
      for (const auto& s : v.arr_str) sum += s.size();
    }
  }
  for (const auto& t : f.tensors()) {
    Check(f.FindTensor(t.name) == &t, "FindTensor returns the tensor");
    Check(t.data != nullptr && t.nbytes == specd::RowBytes(t.type, t.ne[0]) * static_cast<size_t>(t.rows()),
          "nbytes matches the shape");
    sum += static_cast<uint64_t>(t.nelements());
    for (uint64_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
  }
  return sum;
}

// Rebuilds the file with the writer; nested arrays cannot be written, and a huge
// alignment would only make the fuzzer allocate gigabytes of padding.
void RoundTrip(const specd::GgufFile& f) {
  if (f.alignment() > 4096) return;
  specd::GgufWriter w;
  w.SetAlignment(f.alignment());
  size_t n_kv = 0;
  for (const auto& [key, v] : f.metadata()) {
    if (v.type == specd::GgufValueType::ARRAY && v.elem_type == specd::GgufValueType::ARRAY) continue;
    w.Set(key, v);
    ++n_kv;
  }
  if (f.alignment() != specd::kGgufDefaultAlignment && !f.Has("general.alignment")) ++n_kv;
  for (const auto& t : f.tensors()) {
    Check(w.AddTensor(t.name, t.type, t.ne, t.data, t.nbytes).ok(), "writer accepts a parsed tensor");
  }
  auto buf = w.Serialize();
  Check(buf.ok(), "writer serializes a parsed file");
  auto g = specd::GgufFile::FromBuffer(buf->data(), buf->size(), "rewrite");
  Check(g.ok(), "the rewritten file parses");
  const specd::GgufFile& h = **g;
  Check(h.metadata().size() == n_kv, "same number of keys");
  Check(h.tensors().size() == f.tensors().size(), "same number of tensors");
  Check(h.alignment() == f.alignment(), "same alignment");
  for (const auto& [key, v] : f.metadata()) {
    const specd::GgufValue* o = h.Find(key);
    if (v.type == specd::GgufValueType::ARRAY && v.elem_type == specd::GgufValueType::ARRAY) {
      Check(o == nullptr, "nested arrays are dropped");
      continue;
    }
    Check(o && o->type == v.type && o->elem_type == v.elem_type && o->ArraySize() == v.ArraySize() &&
              o->ToString(64) == v.ToString(64),
          "values survive the rewrite");
  }
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const auto& a = f.tensors()[i];
    const auto& b = h.tensors()[i];
    Check(a.name == b.name && a.type == b.type && a.ne == b.ne && a.nbytes == b.nbytes, "tensor info survives");
    for (uint64_t k = 0; k < a.nbytes; ++k) Check(a.data[k] == b.data[k], "tensor data survives");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = specd::GgufFile::FromBuffer(data, size, "fuzz.gguf");
  if (!f.ok()) {
    const std::string msg(f.status().message());
    Check(msg.rfind("fuzz.gguf: ", 0) == 0, "errors name the file");
    return 0;
  }
  volatile uint64_t sink = Touch(**f);
  (void)sink;
  RoundTrip(**f);
  return 0;
}
