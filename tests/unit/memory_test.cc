// One budget per device and weights shared between processes, without a GPU:
// the device registry (entries, locking, stale processes), the budget
// arithmetic and refusal messages, tensor digests against an independent
// reference (PyPI gguf + hashlib), which tensors a draft may map, engines
// that share through the tests' file mode (the protocol the CUDA path uses,
// with the region being the target's file mapping), and the draft's watch of
// the process whose weights it maps.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/str_split.h"
#include "common/engine/engine.h"
#include "common/engine/weight_sharing.h"
#include "common/memory/device_registry.h"
#include "common/memory/driver_memory.h"
#include "common/memory/exporter_watch.h"
#include "common/memory/weight_manifest.h"
#include "common/modelgen/modelgen.h"
#include "gtest/gtest.h"
#include "tests/support/test_models.h"
#include "tests/support/test_util.h"

namespace specd {
namespace {

using testing::SharedTestModels;
using testing::TempDir;

// A child process that lives until killed: a stand-in target or exporter.
class Child {
 public:
  Child() {
    pid_ = fork();
    if (pid_ == 0) {
      while (true) pause();
    }
  }
  ~Child() { Kill(); }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  ProcessId id() const {
    ProcessId p;
    p.pid = pid_;
    // The child may not have its /proc entry complete at once: retry briefly.
    for (int i = 0; i < 100 && p.start == 0; ++i) {
      p.start = ProcessStartTime(pid_).value_or(0);
      if (p.start == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return p;
  }

 private:
  pid_t pid_ = -1;
};

// Writes an entry for another process (Register always writes this one's).
void WriteEntry(const DeviceRegistry& reg, const RegistryEntry& e) {
  std::ofstream out(absl::StrCat(reg.dir(), "/", e.proc.pid, "-", e.serial, ".entry"));
  out << SerializeEntry(e);
}

RegistryEntry EntryFor(const ProcessId& p, const std::string& role, const std::string& state, uint64_t bytes) {
  RegistryEntry e;
  e.proc = p;
  e.role = role;
  e.model = "/models/" + role + ".gguf";
  e.state = state;
  e.bytes = bytes;
  return e;
}

template <typename F>
bool WaitFor(F cond, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

// ---------------------------------------------------------------- processes and entries

TEST(ProcessLiveness, ExitAndPidReuseAreNoticed) {
  const ProcessId self = SelfProcess();
  EXPECT_EQ(self.pid, getpid());
  EXPECT_GT(self.start, 0u);
  EXPECT_TRUE(ProcessAlive(self));
  ProcessId reused = self;
  reused.start += 1;  // same pid, another process start: a reused pid
  EXPECT_FALSE(ProcessAlive(reused));
  Child c;
  const ProcessId child = c.id();
  EXPECT_TRUE(ProcessAlive(child));
  c.Kill();
  EXPECT_FALSE(ProcessAlive(child));
  EXPECT_FALSE(ProcessAlive(ProcessId{}));
}

TEST(RegistryEntry, RoundTripsWithAnExportAndAwkwardNames) {
  RegistryEntry e = EntryFor(SelfProcess(), "target", "ready", 123456789012ull);
  e.model = "/models/my model\twith tab.gguf";
  e.serial = 3;
  e.shared = 77;
  e.shared_from = 4242;
  e.budget = 24ll << 30;
  WeightExport x;
  x.kind = "cuda-ipc";
  x.layout = "cuda-verbatim-pad256-v1";
  x.handle = std::string("\x00\x01\xff\t\n", 5) + std::string(59, 'h');
  x.bytes = 1 << 20;
  x.base = 0x7f0000001000ull;
  x.device = 2;
  x.tensors.push_back({"token_embd.weight", GgmlType::Q4_K, 4096, 151936, 0, 1000, std::string(64, 'a')});
  x.tensors.push_back({"odd name\twith\ttabs\n", GgmlType::F32, 7, 1, 1024, 28, std::string(64, 'b')});
  e.exported = x;
  auto back = ParseEntry(SerializeEntry(e));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->proc, e.proc);
  EXPECT_EQ(back->serial, 3);
  EXPECT_EQ(back->role, "target");
  EXPECT_EQ(back->model, e.model);
  EXPECT_EQ(back->state, "ready");
  EXPECT_EQ(back->bytes, e.bytes);
  EXPECT_EQ(back->shared, 77u);
  EXPECT_EQ(back->shared_from, 4242);
  EXPECT_EQ(back->budget, e.budget);
  ASSERT_TRUE(back->exported.has_value());
  EXPECT_EQ(back->exported->handle, x.handle);
  EXPECT_EQ(back->exported->layout, x.layout);
  EXPECT_EQ(back->exported->base, x.base);
  EXPECT_EQ(back->exported->device, 2);
  ASSERT_EQ(back->exported->tensors.size(), 2u);
  EXPECT_EQ(back->exported->tensors[1].name, x.tensors[1].name);
  EXPECT_EQ(back->exported->tensors[0].type, GgmlType::Q4_K);
  EXPECT_EQ(back->exported->tensors[0].rows, 151936);
  EXPECT_EQ(back->exported->tensors[1].offset, 1024u);
  EXPECT_EQ(back->exported->tensors[1].digest, std::string(64, 'b'));

  std::string text = SerializeEntry(e);
  EXPECT_FALSE(ParseEntry(text.substr(0, text.size() - 4)).ok()) << "a torn file (no 'end') is refused";
  EXPECT_FALSE(ParseEntry("something else\n").ok());
  EXPECT_FALSE(ParseEntry(absl::StrCat(text.substr(0, text.find("end\n")), "bytes\tlots\nend\n")).ok());
  auto newer = ParseEntry(absl::StrCat(text.substr(0, text.find("end\n")), "future_key\t1\nend\n"));
  EXPECT_TRUE(newer.ok()) << "unknown keys of a newer writer are skipped: " << newer.status();
}

// ---------------------------------------------------------------- the registry

TEST(DeviceRegistry, RegistersListsAndRemovesEntries) {
  TempDir dir;
  auto reg = DeviceRegistry::Open(dir.File("root"), "GPU-1234/../evil");
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ((*reg)->dir(), dir.File("root") + "/GPU-1234_.._evil") << "the device key cannot leave the root";
  std::vector<size_t> seen;
  auto first = (*reg)->Register(EntryFor({}, "target", "loading", 100), [&](const std::vector<RegistryEntry>& live) {
    seen.push_back(live.size());
    return absl::OkStatus();
  });
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->entry().proc, SelfProcess()) << "Register records this process";
  auto second = (*reg)->Register(EntryFor({}, "draft", "loading", 50), [&](const std::vector<RegistryEntry>& live) {
    seen.push_back(live.size());
    return absl::OkStatus();
  });
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(seen, (std::vector<size_t>{0, 1})) << "the second sees the first";
  EXPECT_NE((*first)->entry().serial, (*second)->entry().serial);
  // A refusal writes nothing.
  auto refused = (*reg)->Register(EntryFor({}, "bench", "loading", 1), [](const std::vector<RegistryEntry>&) {
    return absl::ResourceExhaustedError("no room");
  });
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  auto live = (*reg)->List();
  ASSERT_TRUE(live.ok());
  ASSERT_EQ(live->size(), 2u);
  // Updates are seen by readers.
  RegistryEntry e = (*first)->entry();
  e.state = "ready";
  e.bytes = 120;
  ASSERT_TRUE((*first)->Update(e).ok());
  live = (*reg)->List();
  ASSERT_TRUE(live.ok());
  std::map<std::string, RegistryEntry> by_role;
  for (const RegistryEntry& x : *live) by_role[x.role] = x;
  EXPECT_EQ(by_role["target"].state, "ready");
  EXPECT_EQ(by_role["target"].bytes, 120u);
  first->reset();
  second->reset();
  live = (*reg)->List();
  ASSERT_TRUE(live.ok());
  EXPECT_TRUE(live->empty()) << "a registration removes its entry when it goes";
}

TEST(DeviceRegistry, EntriesOfGoneProcessesAreIgnoredAndRemoved) {
  TempDir dir;
  auto reg = DeviceRegistry::Open(dir.path(), "GPU-x");
  ASSERT_TRUE(reg.ok());
  Child dead;
  const ProcessId dead_id = dead.id();
  dead.Kill();
  WriteEntry(**reg, EntryFor(dead_id, "target", "ready", 1 << 30));
  ProcessId reused = SelfProcess();
  reused.start += 7;
  WriteEntry(**reg, EntryFor(reused, "draft", "ready", 1 << 29));
  Child alive;
  WriteEntry(**reg, EntryFor(alive.id(), "target", "ready", 1 << 28));
  {
    std::ofstream junk((*reg)->dir() + "/999-0.entry");
    junk << "not an entry\n";
  }
  auto live = (*reg)->List();
  ASSERT_TRUE(live.ok());
  ASSERT_EQ(live->size(), 1u) << "only the live process counts";
  EXPECT_EQ((*live)[0].proc.pid, alive.id().pid);
  EXPECT_NE(access(absl::StrCat((*reg)->dir(), "/", dead_id.pid, "-0.entry").c_str(), F_OK), 0)
      << "a dead process's entry is removed";
  EXPECT_NE(access(absl::StrCat((*reg)->dir(), "/", reused.pid, "-0.entry").c_str(), F_OK), 0)
      << "an entry of a reused pid is removed";
}

// A process forked while another thread holds the registry's lock (a
// worker that forks a helper) must not keep the lock: with the lock released
// only by closing its descriptor, the child's inherited copy held it until the
// child exited, and every List() waited (ExporterWatch's test, 10 s under load).
TEST(DeviceRegistry, AProcessForkedWhileTheLockIsHeldDoesNotKeepIt) {
  TempDir dir;
  auto reg = DeviceRegistry::Open(dir.path(), "GPU-x");
  ASSERT_TRUE(reg.ok());
  std::atomic<bool> stop{false};
  auto lister = std::async(std::launch::async, [&] {
    while (!stop.load()) (void)(*reg)->List();
  });
  std::vector<std::unique_ptr<Child>> children;
  for (int i = 0; i < 40; ++i) children.push_back(std::make_unique<Child>());
  stop.store(true);
  const auto ready = [](auto& f) { return f.wait_for(std::chrono::seconds(5)) == std::future_status::ready; };
  const bool lister_done = ready(lister);
  auto listed = std::async(std::launch::async, [&] { return (*reg)->List().ok(); });
  const bool listed_done = ready(listed);
  children.clear();  // (kills them: a List stuck behind an inherited lock then returns)
  lister.get();
  EXPECT_TRUE(listed.get());
  EXPECT_TRUE(lister_done && listed_done) << "List() waited for the forked children";
}

TEST(DeviceRegistry, TwoEnginesStartingAtOnceCannotBothTakeTheLastBytes) {
  TempDir dir;
  auto reg = DeviceRegistry::Open(dir.path(), "GPU-race");
  ASSERT_TRUE(reg.ok());
  const uint64_t budget = 100;
  std::atomic<int> ok{0}, refused{0};
  std::vector<std::unique_ptr<Registration>> held(2);
  auto start = [&](int i) {
    auto r = (*reg)->Register(EntryFor({}, "engine", "loading", 60), [&](const std::vector<RegistryEntry>& live) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // widen the window
      return BytesAgainstBudget(live, false) + 60 <= budget ? absl::OkStatus()
                                                            : absl::ResourceExhaustedError("does not fit");
    });
    if (r.ok()) {
      held[i] = std::move(*r);
      ++ok;
    } else {
      ++refused;
    }
  };
  std::thread a(start, 0), b(start, 1);
  a.join();
  b.join();
  EXPECT_EQ(ok.load(), 1);
  EXPECT_EQ(refused.load(), 1);
}

TEST(DeviceRegistry, TheDefaultRootIsPerUserAndSharedBySystemdUnits) {
  EXPECT_EQ(DeviceRegistry::DefaultRoot(), absl::StrCat("/dev/shm/specd-registry-", getuid()));
}

// ---------------------------------------------------------------- the budget

TEST(MemoryBudget, WhatTheOthersTakeDependsOnWhatTheBudgetIs) {
  const std::vector<RegistryEntry> others = {EntryFor({1, 1}, "target", "ready", 10),
                                             EntryFor({2, 2}, "draft", "loading", 5)};
  EXPECT_EQ(BytesAgainstBudget(others, false), 15u) << "a fixed budget: everything the others hold";
  EXPECT_EQ(BytesAgainstBudget(others, true), 5u)
      << "the free memory already excludes what they allocated; not what they only reserved";
  EXPECT_EQ(BytesAgainstBudget({}, false), 0u);
}

TEST(MemoryBudget, LedgerArithmeticAndRefusals) {
  MemoryLedger l;
  l.device = "cuda GPU-test";
  l.weights = 100;
  l.kv_pool = 50;
  l.runtime = 10;
  l.budget = 200;
  EXPECT_EQ(l.total(), 160u);
  EXPECT_TRUE(l.fits());
  EXPECT_TRUE(RefuseIfOver(l, "m.gguf").ok());

  l.SetOthers({EntryFor({1234, 1}, "target", "ready", 60)}, false);
  EXPECT_EQ(l.others, 60u);
  EXPECT_FALSE(l.fits()) << "160 + 60 > 200";
  absl::Status st = RefuseIfOver(l, "draft.gguf");
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  const std::string msg(st.message());
  for (const char* want : {"draft.gguf", "fits the budget alone, but not next to", "one budget for the device",
                           "pid 1234 target /models/target.gguf", "other engines", "DOES NOT FIT", "--vram-budget",
                           "nothing is offloaded"})
    EXPECT_NE(msg.find(want), std::string::npos) << want << " missing from:\n" << msg;

  // Sharing 40 bytes of weights with the target makes the pair fit.
  l.ShareWeights(40, 1234);
  EXPECT_EQ(l.weights, 60u);
  EXPECT_EQ(l.shared, 40u);
  EXPECT_EQ(l.total(), 120u);
  EXPECT_TRUE(l.fits());
  const std::string table = l.ToString();
  EXPECT_NE(table.find("shared weights"), std::string::npos) << table;
  EXPECT_NE(table.find("mapped from pid 1234"), std::string::npos) << table;
  EXPECT_NE(table.find("20 B left"), std::string::npos) << table;
  l.ShareWeights(1000, 1234);
  EXPECT_EQ(l.weights, 0u) << "never more than the weights";

  MemoryLedger alone;
  alone.weights = 300;
  alone.budget = 200;
  const std::string m(RefuseIfOver(alone, "big.gguf").message());
  EXPECT_NE(m.find("does not fit the budget"), std::string::npos) << m;
  EXPECT_EQ(m.find("next to"), std::string::npos) << m;

  MemoryLedger free_mem;
  free_mem.weights = 10;
  free_mem.budget = 100;
  free_mem.SetOthers({EntryFor({1, 1}, "target", "ready", 95)}, true);
  EXPECT_TRUE(free_mem.fits()) << "with the free memory as budget a ready engine is already subtracted";
  EXPECT_NE(free_mem.ToString().find("already out of the free memory"), std::string::npos);
}

// The CUDA backend's prompt slab holds the largest layer matrix in F16 within
// [64 MiB, 256 MiB], and the ledger plans it with the rest of the runtime.
TEST(MemoryBudget, ThePromptSlabIsSizedFromTheModelAndPlanned) {
  auto shape = [](const char* name) {
    auto s = PresetShape(name);
    if (!s.ok()) {
      ADD_FAILURE() << s.status();
      return ModelConfig{};
    }
    return ToModelConfig(*s);
  };
  const ModelConfig big = shape("qwen3-27b");  // 25600 x 5120 FFN matrices: 262 MB in F16
  EXPECT_EQ(Engine::PromptSlabBytes(big), size_t{2} * 25600 * 5120) << "an FFN matrix whole";
  ModelConfig huge = big;  // 8192 x 29568: 484 MB
  huge.d_model = 8192;
  huge.ffn_dim = 29568;
  EXPECT_EQ(Engine::PromptSlabBytes(huge), size_t{256} << 20) << "capped";
  const ModelConfig mid = shape("qwen2.5-3b");  // 11008 x 2048: 45 MB
  EXPECT_EQ(Engine::PromptSlabBytes(mid), size_t{64} << 20) << "at least the old fixed slab";
  ModelConfig q_wide = mid;  // q wider than the FFN: 2048 x 24576, 100.7 MB
  q_wide.n_heads = 192;
  EXPECT_EQ(Engine::PromptSlabBytes(q_wide), size_t{2} * 2048 * 192 * 128);

  EngineOptions o;
  o.backend.name = "cuda";
  o.max_seqs = 1;
  o.max_seq_len = 64;
  auto l = Engine::PlanFor(big, 1000, o, int64_t{1} << 40);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->runtime, (size_t{704} << 20) + size_t{2} * 25600 * 5120);
  l = Engine::PlanFor(mid, 1000, o, int64_t{1} << 40);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->runtime, size_t{768} << 20) << "a 64 MiB slab: the flat runtime of before";
  o.backend.name = "cpu";
  l = Engine::PlanFor(big, 1000, o, int64_t{1} << 40);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->runtime, 0u) << "the CPU backend has no device runtime";
}

TEST(MemoryBudget, TheShareWeightsFlag) {
  using Share = EngineOptions::ShareWeights;
  Config c("test");
  EngineOptions::AddShareWeightsFlag(&c, "help");
  EngineOptions::AddFlags(&c);
  auto v = EngineOptions::ShareWeightsFromConfig(c, Share::kImport);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, Share::kImport) << "auto means the role's way of sharing";
  ASSERT_TRUE(c.Set("share-weights", "off", "test").ok());
  EXPECT_EQ(*EngineOptions::ShareWeightsFromConfig(c, Share::kExport), Share::kOff);
  ASSERT_TRUE(c.Set("share-weights", "yes", "test").ok());
  EXPECT_FALSE(EngineOptions::ShareWeightsFromConfig(c, Share::kExport).ok());
  ASSERT_TRUE(c.Set("model", "m.gguf", "test").ok());
  auto o = EngineOptions::FromConfig(c);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->device_registry, "auto");
}

TEST(DriverMemory, AnUnknownDeviceOrNoNvmlIsUnavailableWithAReason) {
  auto r = DriverProcessesOn("GPU-00000000-0000-0000-0000-000000000000");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(r.status().message().empty());
}

// ---------------------------------------------------------------- which tensors are the same

TEST(WeightManifest, DigestsEqualAnIndependentReference) {
  SPECD_REQUIRE_PYREF("gguf");
  const auto& m = SharedTestModels();
  TempDir dir;
  std::string out;
  ASSERT_EQ(testing::RunCommand(testing::ShellQuote(testing::PythonPath()) + " " +
                                    testing::ShellQuote(testing::SourcePath("tests/python/tensor_digests.py")) + " " +
                                    testing::ShellQuote(m.target),
                                &out),
            0);
  std::map<std::string, std::vector<std::string>> ref;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    ASSERT_EQ(f.size(), 4u) << line;
    ref[f[0]] = f;
  }
  auto file = GgufFile::Open(m.target);
  ASSERT_TRUE(file.ok());
  const std::vector<TensorRecord> records = DigestTensors(**file, 2);
  ASSERT_EQ(records.size(), ref.size());
  for (const TensorRecord& r : records) {
    ASSERT_TRUE(ref.count(r.name)) << r.name;
    EXPECT_EQ(std::to_string(static_cast<uint32_t>(r.type)), ref[r.name][1]) << r.name;
    EXPECT_EQ(std::to_string(r.nbytes), ref[r.name][2]) << r.name;
    EXPECT_EQ(r.digest, ref[r.name][3]) << r.name;
  }
}

// The export a target file would publish (offsets: the tensors' file offsets).
WeightExport ExportOf(const GgufFile& f) {
  WeightExport x;
  x.kind = "test";
  x.tensors = DigestTensors(f, 2);
  for (TensorRecord& r : x.tensors) r.offset = f.data_offset() + f.FindTensor(r.name)->offset;
  x.bytes = f.file_size();
  return x;
}

TEST(WeightManifest, ADerivedDraftHoldsItsTargetsTensorsByteForByte) {
  const auto& m = SharedTestModels();
  auto target = GgufFile::Open(m.target);
  auto draft = GgufFile::Open(m.draft);
  ASSERT_TRUE(target.ok() && draft.ok());
  const WeightExport x = ExportOf(**target);
  const SharePlan plan = MatchTensors(**draft, x, 2);
  ASSERT_EQ(plan.tensors.size(), (*draft)->tensors().size()) << plan.Describe();
  uint64_t bytes = 0;
  for (const SharePlan::Item& t : plan.tensors) {
    const GgufTensorInfo* d = (*draft)->FindTensor(t.name);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(std::memcmp(d->data, (*target)->FindTensor(t.name)->data, d->nbytes), 0) << t.name;
    EXPECT_EQ(t.offset, (*target)->data_offset() + (*target)->FindTensor(t.name)->offset);
    bytes += t.nbytes;
  }
  EXPECT_EQ(plan.bytes, bytes);
  EXPECT_EQ(plan.other_content + plan.other_shape + plan.not_offered, 0);
  EXPECT_NE(plan.Describe().find("tensors"), std::string::npos);

  // A corrupt export (a tensor past the region's end) shares nothing.
  WeightExport bad = x;
  bad.tensors[0].offset = bad.bytes;
  EXPECT_TRUE(MatchTensors(**draft, bad, 1).tensors.empty());
}

TEST(WeightManifest, OnlyEqualBytesAreShared) {
  const auto& m = SharedTestModels();
  auto target = GgufFile::Open(m.target);
  ASSERT_TRUE(target.ok());
  const WeightExport x = ExportOf(**target);

  // Another model of the same shape: no matrix is the same (norms of ones may be).
  auto other = GgufFile::Open(m.other);
  ASSERT_TRUE(other.ok());
  const SharePlan p = MatchTensors(**other, x, 2);
  EXPECT_GT(p.other_content, 0);
  for (const SharePlan::Item& t : p.tensors) {
    const GgufTensorInfo* o = (*other)->FindTensor(t.name);
    EXPECT_EQ(std::memcmp(o->data, (*target)->FindTensor(t.name)->data, o->nbytes), 0) << t.name;
    EXPECT_EQ(o->ne.size(), 1u) << t.name << ": only vectors can coincide here";
  }

  // Another vocabulary: token_embd has another shape.
  auto foreign = GgufFile::Open(m.foreign);
  ASSERT_TRUE(foreign.ok());
  EXPECT_GT(MatchTensors(**foreign, x, 2).other_shape, 0);

  // The derived draft with one byte of its embedding changed: that tensor alone is not shared.
  auto draft = GgufFile::Open(m.draft);
  ASSERT_TRUE(draft.ok());
  GgufWriter w;
  for (const auto& [k, v] : (*draft)->metadata()) {
    if (k != "general.alignment") w.Set(k, v);
  }
  for (const auto& t : (*draft)->tensors()) {
    std::vector<uint8_t> data(t.data, t.data + t.nbytes);
    if (t.name == "token_embd.weight") data[data.size() / 2] ^= 1;
    ASSERT_TRUE(w.AddTensor(t.name, t.type, t.ne, data.data(), data.size()).ok());
  }
  TempDir dir;
  ASSERT_TRUE(w.WriteFile(dir.File("changed.gguf")).ok());
  auto changed = GgufFile::Open(dir.File("changed.gguf"));
  ASSERT_TRUE(changed.ok());
  const SharePlan c = MatchTensors(**changed, x, 2);
  EXPECT_EQ(c.other_content, 1);
  EXPECT_EQ(c.tensors.size(), (*draft)->tensors().size() - 1);
  for (const SharePlan::Item& t : c.tensors) EXPECT_NE(t.name, "token_embd.weight");

  // The same draft requantized: its matrices have another type.
  DeriveOptions d;
  d.layers = 1;
  d.weight_type = "Q8_0";
  ASSERT_TRUE(DeriveDraft(m.target, d, dir.File("q8.gguf")).ok());
  auto q8 = GgufFile::Open(dir.File("q8.gguf"));
  ASSERT_TRUE(q8.ok());
  EXPECT_GT(MatchTensors(**q8, x, 2).other_shape, 0);
}

TEST(WeightManifest, ARequantizedDerivedDraftStillSharesTheTensorsWhoseTypeStays) {
  // A Q4_K_M target and a Q4_K_S draft derived from it: the embedding (Q4_K)
  // and the output head (Q6_K) keep their type, so their bytes are the target's.
  TempDir dir;
  GenOptions g;
  auto shape = PresetShape("small");
  ASSERT_TRUE(shape.ok());
  g.shape = *shape;
  g.weight_type = "Q4_K_M";
  ASSERT_TRUE(GenerateModel(g, dir.File("t.gguf")).ok());
  DeriveOptions d;
  d.layers = 4;  // all: the M mix gives layers 2-3 Q6_K attn_v/ffn_down, the S mix Q4_K
  d.weight_type = "Q4_K_S";
  ASSERT_TRUE(DeriveDraft(dir.File("t.gguf"), d, dir.File("d.gguf")).ok());
  auto t = GgufFile::Open(dir.File("t.gguf"));
  auto df = GgufFile::Open(dir.File("d.gguf"));
  ASSERT_TRUE(t.ok() && df.ok());
  const SharePlan p = MatchTensors(**df, ExportOf(**t), 2);
  std::set<std::string> shared;
  for (const SharePlan::Item& i : p.tensors) shared.insert(i.name);
  EXPECT_TRUE(shared.count("token_embd.weight")) << p.Describe();
  EXPECT_TRUE(shared.count("output.weight")) << p.Describe();
  EXPECT_GT(p.other_shape, 0) << "some layer matrices change type: " << p.Describe();
}

// ---------------------------------------------------------------- engines that share

class SharingEngines : public ::testing::Test {
 protected:
  void SetUp() override { SetFileWeightSharingForTesting(true); }
  void TearDown() override { SetFileWeightSharingForTesting(false); }

  EngineOptions Opts(const std::string& model, EngineOptions::ShareWeights share, const std::string& role) {
    EngineOptions o;
    o.model_path = model;
    o.backend.threads = 1;
    o.max_seqs = 2;
    o.max_seq_len = 256;
    o.max_batch_tokens = 32;
    o.device_registry = dir_.File("registry");
    o.role = role;
    o.share_weights = share;
    o.digest_threads = 2;
    o.memory_budget = 1ll << 30;  // a fixed budget: the others' entries count against it
    return o;
  }
  static std::vector<float> Logits(Engine& e, const std::vector<int32_t>& tokens) {
    std::vector<float> out;
    EXPECT_TRUE(e.NewSequence(0).ok());
    EXPECT_TRUE(e.Run({Engine::Feed{0, tokens, static_cast<int>(tokens.size())}}, &out).ok());
    e.Release(0);
    return out;
  }
  TempDir dir_;
};

TEST_F(SharingEngines, ADerivedDraftMapsTheTargetsTensorsAndComputesTheSameBitForBit) {
  using Share = EngineOptions::ShareWeights;
  const auto& m = SharedTestModels();
  auto target = Engine::Create(Opts(m.target, Share::kExport, "target"));
  ASSERT_TRUE(target.ok()) << target.status();
  const WeightExport* x = (*target)->exported();
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->kind, "file");
  EXPECT_EQ(x->tensors.size(), (*target)->file().tensors().size());
  EXPECT_EQ((*target)->weight_sharing().rfind("exports", 0), 0u) << (*target)->weight_sharing();

  auto draft = Engine::Create(Opts(m.draft, Share::kImport, "draft"));
  ASSERT_TRUE(draft.ok()) << draft.status();
  uint64_t draft_bytes = 0;
  for (const auto& t : (*draft)->file().tensors()) draft_bytes += t.nbytes;
  const MemoryLedger& l = (*draft)->ledger();
  EXPECT_EQ(l.shared, draft_bytes) << "every tensor of a derived draft is the target's";
  EXPECT_EQ(l.weights, 0u);
  EXPECT_EQ(l.shared_from, getpid());
  EXPECT_EQ((*draft)->shared_from(), SelfProcess());
  EXPECT_EQ((*draft)->weight_sharing().rfind("maps", 0), 0u) << (*draft)->weight_sharing();
  EXPECT_EQ(l.others, (*target)->ledger().total()) << "the target's share of the one budget";
  // Its weights are the target's bytes, in place.
  (*draft)->model().ForEachWeight([&](const Weight& w) {
    EXPECT_EQ(w.data, (*target)->file().FindTensor(w.name)->data) << w.name;
  });

  // The registry holds both, the draft with its own bytes only.
  auto reg = DeviceRegistry::Open(dir_.File("registry"), "host");
  ASSERT_TRUE(reg.ok());
  auto live = (*reg)->List();
  ASSERT_TRUE(live.ok());
  ASSERT_EQ(live->size(), 2u);
  for (const RegistryEntry& e : *live) {
    EXPECT_EQ(e.state, "ready");
    if (e.role == "draft") {
      EXPECT_EQ(e.bytes, l.total());
      EXPECT_EQ(e.shared, draft_bytes);
    } else {
      EXPECT_TRUE(e.exported.has_value());
    }
  }

  // The same draft with its own copy computes exactly the same logits.
  auto own = Engine::Create(Opts(m.draft, Share::kOff, "draft-own"));
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ((*own)->ledger().shared, 0u);
  EXPECT_EQ((*own)->ledger().weights, draft_bytes);
  const std::vector<int32_t> tokens = {1, 17, 42, 99, 3, 250, 7};
  const std::vector<float> a = Logits(**draft, tokens), b = Logits(**own, tokens);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);

  // A model that holds little of the target maps only what is identical.
  auto other = Engine::Create(Opts(m.other, Share::kImport, "draft-other"));
  ASSERT_TRUE(other.ok());
  EXPECT_GT((*other)->ledger().weights, (*other)->ledger().shared);
}

TEST_F(SharingEngines, SharingDecidesWhetherThePairFits) {
  using Share = EngineOptions::ShareWeights;
  const auto& m = SharedTestModels();
  auto probe = Engine::Create(Opts(m.draft, Share::kOff, "probe"));
  ASSERT_TRUE(probe.ok());
  const size_t draft_own = (*probe)->ledger().total(), draft_weights = (*probe)->ledger().weights;
  probe->reset();
  EngineOptions to = Opts(m.target, Share::kExport, "target");
  auto target = Engine::Create(to);
  ASSERT_TRUE(target.ok());
  // A budget the pair fits only when the draft maps its weights.
  const int64_t budget = static_cast<int64_t>((*target)->ledger().total() + draft_own - draft_weights / 2);
  EngineOptions own = Opts(m.draft, Share::kOff, "draft");
  own.memory_budget = budget;
  auto refused = Engine::Create(own);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("not next to what the other engines"), std::string::npos)
      << refused.status();
  EngineOptions shared = own;
  shared.share_weights = Share::kImport;
  auto fits = Engine::Create(shared);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_LE((*fits)->ledger().total() + (*target)->ledger().total(), static_cast<size_t>(budget));
}

TEST(WeightSharing, TheCpuBackendSharesNothingAndSaysWhy) {
  using Share = EngineOptions::ShareWeights;
  const auto& m = SharedTestModels();
  TempDir dir;
  EngineOptions o;
  o.model_path = m.target;
  o.backend.threads = 1;
  o.max_seqs = 1;
  o.max_seq_len = 128;
  o.max_batch_tokens = 16;
  o.device_registry = dir.File("registry");
  o.share_weights = Share::kExport;
  auto t = Engine::Create(o);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->exported(), nullptr);
  EXPECT_NE((*t)->weight_sharing().find("page cache"), std::string::npos) << (*t)->weight_sharing();
  o.model_path = m.draft;
  o.share_weights = Share::kImport;
  auto d = Engine::Create(o);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ((*d)->ledger().shared, 0u);
  EXPECT_EQ((*d)->weight_sharing().rfind("own copy: cpu backend", 0), 0u) << (*d)->weight_sharing();
  // Without --device-registry the cpu backend plans alone (auto: off for host memory).
  o.device_registry = "auto";
  auto alone = Engine::Create(o);
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ((*alone)->registry(), nullptr);
  EXPECT_EQ((*alone)->ledger().others, 0u);
}

// ---------------------------------------------------------------- following the exporter

TEST(ExporterWatch, DropsWhenTheExporterExitsAndReloadsWhenATargetIsReady) {
  TempDir dir;
  auto reg = DeviceRegistry::Open(dir.path(), "GPU-watch");
  ASSERT_TRUE(reg.ok());
  std::mutex mu;
  std::vector<ProcessId> dropped;
  std::vector<absl::StatusOr<ProcessId>> script;  // what the next reloads return
  int reloads = 0;
  ExporterWatch::Callbacks cb;
  cb.drop = [&](const ProcessId& p) {
    std::lock_guard<std::mutex> l(mu);
    dropped.push_back(p);
  };
  cb.reload = [&]() -> absl::StatusOr<ProcessId> {
    std::lock_guard<std::mutex> l(mu);
    ++reloads;
    if (script.empty()) return absl::InternalError("unexpected reload");
    auto r = script.front();
    script.erase(script.begin());
    return r;
  };
  auto count = [&](auto fn) {
    std::lock_guard<std::mutex> l(mu);
    return fn();
  };
  auto watch_reg = DeviceRegistry::Open(dir.path(), "GPU-watch");
  ASSERT_TRUE(watch_reg.ok());
  ExporterWatch watch(std::move(*watch_reg), cb, std::chrono::milliseconds(10));
  EXPECT_EQ(watch.state(), ExporterWatch::State::kIdle);

  auto first = std::make_unique<Child>();
  const ProcessId first_id = first->id();
  WriteEntry(**reg, EntryFor(first_id, "target", "ready", 100));
  watch.Follow(first_id);
  EXPECT_EQ(watch.state(), ExporterWatch::State::kFollowing);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(count([&] { return dropped.size(); }), 0u) << "alive: nothing happens";

  first->Kill();
  ASSERT_TRUE(WaitFor([&] { return watch.state() == ExporterWatch::State::kWaiting; }));
  ASSERT_EQ(count([&] { return dropped.size(); }), 1u);
  EXPECT_EQ(count([&] { return dropped[0]; }), first_id);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(count([&] { return reloads; }), 0) << "no target ready yet";

  // A target that is still loading is not ready.
  Child second;
  const ProcessId second_id = second.id();
  RegistryEntry e2 = EntryFor(second_id, "target", "loading", 100);
  WriteEntry(**reg, e2);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(count([&] { return reloads; }), 0);
  // Ready: the draft loads again and maps from it.
  {
    std::lock_guard<std::mutex> l(mu);
    script.push_back(second_id);
  }
  e2.state = "ready";
  WriteEntry(**reg, e2);
  ASSERT_TRUE(WaitFor([&] { return watch.state() == ExporterWatch::State::kFollowing; }));
  EXPECT_EQ(count([&] { return reloads; }), 1);

  // That target exits too; the next one refuses the reload (say, the budget):
  // not retried against the same process, retried against the next.
  Child third;
  const ProcessId third_id = third.id();
  {
    std::lock_guard<std::mutex> l(mu);
    script.push_back(absl::ResourceExhaustedError("does not fit"));
  }
  second.Kill();
  ASSERT_TRUE(WaitFor([&] { return count([&] { return dropped.size(); }) == 2u; }));
  WriteEntry(**reg, EntryFor(third_id, "target", "ready", 100));
  ASSERT_TRUE(WaitFor([&] { return count([&] { return reloads; }) == 2; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(count([&] { return reloads; }), 2) << "a refused reload waits for another target process";
  EXPECT_EQ(watch.state(), ExporterWatch::State::kWaiting);

  // The next target offers no weights: the draft loads an own copy and follows nothing.
  third.Kill();
  Child fourth;
  {
    std::lock_guard<std::mutex> l(mu);
    script.push_back(ProcessId{});
  }
  WriteEntry(**reg, EntryFor(fourth.id(), "target", "ready", 100));
  ASSERT_TRUE(WaitFor([&] { return watch.state() == ExporterWatch::State::kIdle; }));
  EXPECT_EQ(count([&] { return reloads; }), 3);

  // A swap while waiting decides instead of the watch.
  Child fifth;
  watch.Follow(fifth.id());
  EXPECT_EQ(watch.state(), ExporterWatch::State::kFollowing);
  watch.Follow(ProcessId{});
  EXPECT_EQ(watch.state(), ExporterWatch::State::kIdle);
}

}  // namespace
}  // namespace specd
