// specd tune: sweeps service settings for one workload and writes the best
// as config files the services accept.
//
// The grid: KV type x batch (worker sequence slots) x speculation mode
// (fixed k, adaptive, plus a target-only baseline) x sampling temperature.
// Workers restart only when a worker setting changes (KV type, batch); the
// coordinator restarts for every speculation mode, so each trial measures
// exactly the keys that are written. A worker that refuses its memory plan
// makes its trials "does not fit" — recorded, not fatal.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/cli_util.h"
#include "cli/commands.h"

#if defined(SPECD_HAVE_CLIENT)
#include "cli/loadgen_lib.h"
#include "cli/tune_service.h"
#include "common/engine/engine.h"
#include "common/gguf/gguf.h"
#include "common/model/model.h"
#include "common/shm/exchange.h"
#include "coordinator/client/client.h"
#include "nlohmann/json.hpp"
#endif

namespace specd::cli {

#if !defined(SPECD_HAVE_CLIENT)
int Tune(const std::vector<std::string>&) { return Fail("this build has no coordinator client"); }
#else

namespace {

using tune::KeyValues;

// One speculation mode of the coordinator.
struct Mode {
  int k = 0;                  // 0: target-only; adaptive: the cap
  bool adaptive = false;
  double min_confidence = -1; // the draft stops below this probability (-1: the coordinator's default)
  std::string Name() const {
    if (k == 0) return "target-only";
    if (!adaptive) return absl::StrCat("k=", k);
    return min_confidence < 0 ? absl::StrFormat("adaptive k<=%d", k)
                              : absl::StrFormat("adaptive k<=%d c=%.2g", k, min_confidence);
  }
};

struct Trial {
  int id = 0;
  std::string kv;
  int batch = 0;
  Mode mode;
  double temperature = 0;
  std::string status = "pending";  // ok, errors, does not fit, failed to start, skipped
  std::string note;
  loadgen::LoadReport rep;
  uint64_t target_mem = 0, draft_mem = 0;  // planned ledgers
  int64_t target_budget = -1, draft_budget = -1;
  bool best = false;
  std::string ConfigKey() const { return absl::StrCat(kv, "/", batch, "/", mode.Name()); }
};

std::string AbsPath(const std::string& p) {
  char buf[4096];
  if (realpath(p.c_str(), buf)) return buf;
  return p;
}

bool MakeDirs(const std::string& path) {
  std::string cur;
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    cur += std::string(part) + "/";
    if (part.empty()) continue;
    if (mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  return static_cast<bool>(out);
}

std::string Mib(uint64_t b) { return absl::StrFormat("%.0f MiB", static_cast<double>(b) / (1024.0 * 1024.0)); }

// The memory a worker would plan for (0 when the plan itself fails: the
// worker then reports why).
uint64_t PlannedBytes(const std::string& model, const std::string& backend, int max_seqs, int max_seq_len,
                      const std::string& kv, int k_max, bool draft) {
  auto f = GgufFile::Open(model);
  if (!f.ok()) return 0;
  EngineOptions o;
  o.model_path = model;
  o.backend.name = backend;
  o.max_seqs = max_seqs;
  o.max_seq_len = max_seq_len;
  auto t = ParseKvType(kv);
  if (!t.ok()) return 0;
  o.kv_type = *t;
  if (draft) {
    auto cfg = ModelConfig::FromGguf(**f);
    if (!cfg.ok()) return 0;
    o.exchange_bytes = static_cast<int64_t>(ExchangeBuffer::BytesFor(max_seqs, k_max, cfg->vocab_size));
  }
  auto l = Engine::Plan(**f, o, -1);
  return l.ok() ? l->total() : 0;
}

std::string StatusCell(const Trial& t) { return t.best ? "**best**" : t.status; }

std::string MarkdownTable(const std::vector<Trial>& trials) {
  std::ostringstream os;
  os << "| # | kv | batch | speculation | temp | status | out tok/s | req/s | TTFT p50 / p99 ms | ITL p50 / p99 ms "
        "| request p50 / p99 ms | accept | mean acc. len | ok / failed | target / draft plan |\n";
  os << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Trial& t : trials) {
    const auto& r = t.rep;
    const bool ran = t.status == "ok" || t.status == "errors";
    auto pp = [&](const loadgen::Percentiles& p) {
      return ran ? absl::StrFormat("%.1f / %.1f", p.p50, p.p99) : std::string("–");
    };
    os << absl::StrFormat(
        "| %d | %s | %d | %s | %.2g | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s |\n", t.id, t.kv, t.batch,
        t.mode.Name(), t.temperature, StatusCell(t) + (t.note.empty() || t.status == "ok" ? "" : " (" + t.note + ")"),
        ran ? absl::StrFormat("%.1f", r.output_tokens_per_s) : "–",
        ran ? absl::StrFormat("%.2f", r.requests_per_s) : "–", pp(r.ttft_ms), pp(r.itl_ms), pp(r.total_ms),
        ran && r.proposed ? absl::StrFormat("%.1f%%", 100.0 * r.acceptance_rate) : "–",
        ran && r.spec_steps ? absl::StrFormat("%.2f", r.mean_accepted_length) : "–",
        ran ? absl::StrFormat("%d / %d", r.ok, r.failed) : "–", t.target_mem ? Mib(t.target_mem) : "?",
        t.mode.k == 0 && t.draft_mem == 0 ? "–" : (t.draft_mem ? Mib(t.draft_mem) : "?"));
  }
  return os.str();
}

std::string TrialsJson(const std::vector<Trial>& trials, const std::string& command, const std::string& best_key,
                       const std::string& objective, const nlohmann::ordered_json& workload) {
  using nlohmann::ordered_json;
  auto pct = [](const loadgen::Percentiles& p) {
    return ordered_json{{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"mean", p.mean}, {"n", p.n}};
  };
  ordered_json rows = ordered_json::array();
  for (const Trial& t : trials) {
    const auto& r = t.rep;
    rows.push_back({{"id", t.id}, {"kv_type", t.kv}, {"batch", t.batch}, {"speculation", t.mode.Name()},
                    {"k", t.mode.k}, {"min_confidence", t.mode.min_confidence}, {"temperature", t.temperature},
                    {"status", t.status}, {"note", t.note}, {"best", t.best}, {"target_plan_bytes", t.target_mem},
                    {"draft_plan_bytes", t.draft_mem}, {"target_budget", t.target_budget},
                    {"draft_budget", t.draft_budget}, {"sent", r.sent}, {"ok", r.ok}, {"failed", r.failed},
                    {"output_tokens", r.output_tokens}, {"wall_s", r.wall_s},
                    {"output_tokens_per_s", r.output_tokens_per_s}, {"requests_per_s", r.requests_per_s},
                    {"ttft_ms", pct(r.ttft_ms)}, {"itl_ms", pct(r.itl_ms)}, {"tpot_ms", pct(r.tpot_ms)},
                    {"total_ms", pct(r.total_ms)}, {"acceptance_rate", r.acceptance_rate},
                    {"mean_accepted_length", r.mean_accepted_length}, {"verify_mismatches", r.verify_mismatches}});
  }
  const ordered_json j = {{"command", command}, {"objective", objective}, {"workload", workload},
                          {"best", best_key}, {"trials", rows}};
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace

int Tune(const std::vector<std::string>& args) {
  Config c("specd tune");
  c.AddString("target", "", "target GGUF");
  c.AddString("draft", "", "draft GGUF (empty: only target-only trials)");
  c.AddBytes("vram-budget", "auto", "memory for both workers together (split: the draft gets its plan, the target the rest)");
  c.AddString("backend", "cpu", "workers' compute backend: cpu or cuda");
  c.AddInt("threads", 0, "CPU threads per worker (0: all cores)", 0, 1024);
  c.AddInt("device", 0, "CUDA device", 0, 64);
  // The grid.
  c.AddString("kv-types", "f16,q8_0", "KV cache types to try");
  c.AddString("batches", "1,4,8", "worker sequence slots (max-seqs = max-batch) to try");
  c.AddString("ks", "2,4,6", "fixed draft lengths to try (0: target-only)");
  c.AddString("adaptive", "auto",
              "adaptive trials, one per draft-confidence threshold: a list like 0.3,0.6, 'auto' (the coordinator's "
              "default threshold) or empty (none)");
  c.AddInt("draft-max", 8, "adaptive trials: most draft tokens per step", 1, 64);
  c.AddBool("baseline", true, "one target-only trial per batch and temperature (on the first KV type)");
  c.AddString("temperatures", "0,0.8", "sampling temperatures to try (0: greedy); a configuration's score is its mean");
  c.AddDouble("top-p", 1.0, "nucleus probability of the sampled trials", 1e-6, 1.0);
  c.AddInt("top-k", 0, "top-k of the sampled trials (0: off)", 0, 1 << 24);
  // The workload.
  c.AddInt("concurrency", 8, "requests in flight", 1, 4096);
  c.AddString("prompt-tokens", "64:256", "prompt length in tokens: N or MIN:MAX");
  c.AddString("max-tokens", "64:128", "output length: N or MIN:MAX");
  c.AddInt("distinct-prompts", 16, "synthesized prompts", 1, 100000);
  c.AddBool("ignore-eos", true, "generate the full output length (comparable trials)");
  c.AddInt("seed", 1, "workload seed", 0, INT64_MAX);
  c.AddDouble("trial-seconds", 15, "load per trial (requests running at the end finish)", 0.1, 86400);
  c.AddInt("warmup", -1, "unmeasured requests before each trial (-1: --concurrency)", -1, 1 << 20);
  c.AddInt("repeats", 1, "runs per trial; the one with the median throughput is reported (noisy machines)", 1, 100);
  c.AddBool("verify-greedy", false, "greedy trials also check every output against its target-only reference");
  // The choice.
  c.AddString("objective", "throughput", "throughput (output tokens/s) or latency (p50 request time)");
  c.AddDouble("max-ttft-p99-ms", 0, "only configurations whose p99 time to first token stays under this (0: any)", 0,
              1e9);
  // Running it.
  c.AddInt("max-seq-len", 0, "worker context (0: the workload's longest request + k + slack)", 0, 1 << 20);
  c.AddInt("start-timeout-s", 300, "longest wait for the services to start", 1, 86400);
  c.AddString("bin-dir", "", "directory of specd-coordinator and the workers (default: next to specd / build tree / PATH)");
  c.AddString("out-dir", "tune-out", "where target.conf, draft.conf, coordinator.conf, trials.md/json and logs go");
  c.AddString("listen-target", "127.0.0.1:7811", "listen address written to target.conf");
  c.AddString("listen-draft", "127.0.0.1:7812", "listen address written to draft.conf");
  c.AddString("listen-coordinator", "127.0.0.1:7810", "listen address written to coordinator.conf");
  c.AddBool("check-config", true, "start the services from the written files and serve a few requests");
  c.AddBool("quick", false, "a small grid for tests: f16 and q8_0 at k=4 plus the baseline, batch 2, greedy, 3 s each");
  c.AddBool("dry-run", false, "print the grid and exit");
  if (int rc = ParseOrExit(c, args); rc >= 0) return rc;
  if (!c.positional().empty()) return Fail("unexpected argument '" + c.positional()[0] + "'");
  if (c.GetBool("quick")) {
    // Defaults only: anything given explicitly still wins.
    auto quick = [&](const char* k, const char* v) {
      if (!c.IsSet(k)) c.Set(k, v, "--quick").IgnoreError();
    };
    quick("kv-types", "f16,q8_0");
    quick("batches", "2");
    quick("ks", "4");
    quick("adaptive", "");
    quick("temperatures", "0");
    quick("concurrency", "2");
    quick("prompt-tokens", "8:32");
    quick("max-tokens", "8:24");
    quick("distinct-prompts", "4");
    quick("trial-seconds", "3");
    quick("warmup", "1");
    quick("start-timeout-s", "60");
  }

  const std::string target = c.GetString("target"), draft = c.GetString("draft");
  if (target.empty()) return Fail("--target is required");
  for (const std::string& m : {target, draft}) {
    if (m.empty()) continue;
    auto f = GgufFile::Open(m);
    if (!f.ok()) return Fail(f.status());
  }
  std::vector<std::string> kv_types;
  for (const std::string& kv : SplitList(c.GetString("kv-types"))) {
    if (!ParseKvType(kv).ok()) return Fail("unknown KV type '" + kv + "' (f32, f16, q8_0)");
    kv_types.push_back(kv);
  }
  auto batches = ParseList<int>(c.GetString("batches"), "batch", 1, 4096);
  auto ks = ParseList<int>(c.GetString("ks"), "k", 0, 64);
  auto thresholds = c.GetString("adaptive") == "auto"
                        ? absl::StatusOr<std::vector<double>>(std::vector<double>{-1})
                        : ParseList<double>(c.GetString("adaptive"), "adaptive threshold", 0.0, 1.0);
  auto temps = ParseList<double>(c.GetString("temperatures"), "temperature", 0.0, 100.0);
  for (const absl::Status& st : {batches.status(), ks.status(), thresholds.status(), temps.status()}) {
    if (!st.ok()) return Fail(st);
  }
  if (kv_types.empty() || batches->empty() || temps->empty()) return Fail("empty grid (--kv-types, --batches, --temperatures)");
  auto pt = loadgen::ParseRange(c.GetString("prompt-tokens"), 1, 1 << 20);
  auto mt = loadgen::ParseRange(c.GetString("max-tokens"), 1, 1 << 20);
  if (!pt.ok()) return Fail(pt.status());
  if (!mt.ok()) return Fail(mt.status());
  const std::string objective = c.GetString("objective");
  if (objective != "throughput" && objective != "latency") return Fail("--objective is throughput or latency");

  // What the installed coordinator supports decides how modes are expressed.
  tune::Service::Binaries bins;
  std::set<std::string> copts;
  {
    auto b1 = tune::FindBinary("specd-target-worker", c.GetString("bin-dir"));
    auto b2 = tune::FindBinary("specd-draft-worker", c.GetString("bin-dir"));
    auto b3 = tune::FindBinary("specd-coordinator", c.GetString("bin-dir"));
    for (const auto* b : {&b1, &b2, &b3}) {
      if (!b->ok()) return Fail(b->status());
    }
    bins = {*b1, *b2, *b3};
    auto o = tune::OptionsOf(bins.coordinator);
    if (!o.ok()) return Fail(o.status());
    copts = std::move(*o);
  }
  const bool has_adaptive = copts.count("adaptive") > 0;

  // Speculation modes.
  std::vector<Mode> modes;
  int k_max = 1;
  for (int k : *ks) {
    if (k > 0 && draft.empty()) continue;
    modes.push_back({k, false, -1});
    k_max = std::max(k_max, k);
  }
  if (!draft.empty()) {
    // Without the coordinator's --adaptive, "adaptive" is the draft stopping
    // early below a confidence threshold, up to k.
    const int cap = has_adaptive ? static_cast<int>(c.GetInt("draft-max"))
                                 : std::max(1, ks->empty() ? 4 : *std::max_element(ks->begin(), ks->end()));
    for (double th : *thresholds) {
      if (!has_adaptive && th < 0) th = 0.5;
      modes.push_back({cap, true, th});
    }
    if (!thresholds->empty()) k_max = std::max(k_max, cap);
  }
  const bool baseline = c.GetBool("baseline") || draft.empty();
  const bool have_zero = std::any_of(modes.begin(), modes.end(), [](const Mode& m) { return m.k == 0; });
  if (modes.empty() && !baseline) return Fail("no speculation mode to try (--ks, --adaptive, --baseline)");

  // The workers' context: the longest request plus the draft's lookahead.
  int max_seq_len = static_cast<int>(c.GetInt("max-seq-len"));
  if (max_seq_len == 0) max_seq_len = ((pt->hi + mt->hi + k_max + 2 + 15) / 16) * 16;

  // The grid, in the order it runs: workers restart per (kv, batch).
  std::vector<Trial> trials;
  for (size_t ki = 0; ki < kv_types.size(); ++ki) {
    for (int b : *batches) {
      std::vector<Mode> ms;
      if (baseline && !have_zero && ki == 0) ms.push_back({0, false, -1});
      ms.insert(ms.end(), modes.begin(), modes.end());
      for (const Mode& m : ms) {
        for (double temp : *temps) {
          Trial t;
          t.id = static_cast<int>(trials.size()) + 1;
          t.kv = kv_types[ki];
          t.batch = b;
          t.mode = m;
          t.temperature = temp;
          trials.push_back(t);
        }
      }
    }
  }
  // Memory: the draft gets what it plans for, the target the rest of the budget.
  const int64_t budget = c.GetBytes("vram-budget");
  const std::string backend = c.GetString("backend");
  for (Trial& t : trials) {
    t.target_mem = PlannedBytes(target, backend, t.batch, max_seq_len, t.kv, k_max, false);
    t.draft_mem = draft.empty() ? 0 : PlannedBytes(draft, backend, t.batch, max_seq_len, t.kv, k_max, true);
    if (budget >= 0) {
      const int64_t d = draft.empty() ? 0 : std::min<int64_t>(budget, static_cast<int64_t>((t.draft_mem * 102 / 100 + (1 << 20)) & ~((1ull << 20) - 1)));
      t.draft_budget = draft.empty() ? -1 : d;
      t.target_budget = budget - d;
    }
  }

  std::fprintf(stderr, "tune: %zu trials (kv %s; batch %s; speculation %s; temperature %s), %.1f s each, max-seq-len %d\n",
               trials.size(), c.GetString("kv-types").c_str(), c.GetString("batches").c_str(),
               absl::StrJoin(modes, ", ", [](std::string* o, const Mode& m) { o->append(m.Name()); }).c_str(),
               c.GetString("temperatures").c_str(), c.GetDouble("trial-seconds"), max_seq_len);
  if (c.GetBool("dry-run")) {
    std::printf("%s", MarkdownTable(trials).c_str());
    return 0;
  }

  const std::string out_dir = c.GetString("out-dir");
  const std::string log_dir = out_dir + "/logs";
  if (!MakeDirs(log_dir)) return Fail("cannot create " + log_dir);
  const auto start_timeout = std::chrono::seconds(c.GetInt("start-timeout-s"));

  // Worker keys (the same become flags now and config lines later).
  const std::string target_abs = AbsPath(target), draft_abs = draft.empty() ? "" : AbsPath(draft);
  auto worker_keys = [&](const Trial& t, bool is_draft) {
    KeyValues kv = {{"model", is_draft ? draft_abs : target_abs}, {"backend", backend}};
    if (c.IsSet("threads") || c.GetBool("quick")) kv.emplace_back("threads", std::to_string(c.GetInt("threads")));
    if (backend == "cuda") kv.emplace_back("device", std::to_string(c.GetInt("device")));
    kv.emplace_back("max-seqs", std::to_string(t.batch));
    kv.emplace_back("max-batch", std::to_string(t.batch));
    kv.emplace_back("max-seq-len", std::to_string(max_seq_len));
    kv.emplace_back("kv-type", t.kv);
    const int64_t b = is_draft ? t.draft_budget : t.target_budget;
    if (b >= 0) kv.emplace_back("vram-budget", std::to_string(b));
    if (is_draft) kv.emplace_back("k-max", std::to_string(k_max));
    return kv;
  };
  auto coordinator_keys = [&](const Mode& m) {
    KeyValues kv;
    kv.emplace_back("speculation", m.k > 0 ? "true" : "false");
    if (m.k == 0) return kv;  // the draft stays connected: speculation can be turned on at run time
    if (has_adaptive) {
      kv.emplace_back("adaptive", m.adaptive ? "true" : "false");
      if (m.adaptive && copts.count("draft-max")) kv.emplace_back("draft-max", std::to_string(m.k));
      if (!m.adaptive) kv.emplace_back("k", std::to_string(std::max(1, m.k)));
    } else {
      kv.emplace_back("k", std::to_string(std::max(1, m.k)));
    }
    // Fixed k proposes k tokens; adaptive stops at the threshold (default: the coordinator's).
    if (!m.adaptive) kv.emplace_back("min-confidence", "0");
    else if (m.min_confidence >= 0) kv.emplace_back("min-confidence", absl::StrFormat("%g", m.min_confidence));
    // Admission: every request of the workload may wait (none refused by a full queue).
    if (copts.count("max-queue") && c.GetInt("concurrency") > 64)
      kv.emplace_back("max-queue", std::to_string(c.GetInt("concurrency")));
    return kv;
  };

  loadgen::LoadSpec base;
  base.concurrency = static_cast<int>(c.GetInt("concurrency"));
  base.duration_s = c.GetDouble("trial-seconds");
  base.drain_s = std::max(5.0, base.duration_s);
  base.prompt_tokens = *pt;
  base.max_tokens = *mt;
  base.distinct_prompts = static_cast<int>(c.GetInt("distinct-prompts"));
  base.seed = static_cast<uint64_t>(c.GetInt("seed"));
  base.ignore_eos = c.GetBool("ignore-eos");
  base.sampling.seed = base.seed;
  base.sampling.top_p = static_cast<float>(c.GetDouble("top-p"));
  base.sampling.top_k = static_cast<int32_t>(c.GetInt("top-k"));
  base.warmup_requests = c.GetInt("warmup") < 0 ? base.concurrency : static_cast<int>(c.GetInt("warmup"));
  // Streaming requests are cancelled at the end of the drain; this bounds
  // one that never streams (stuck in a queue).
  base.request_timeout_ms = static_cast<int>(std::min(1e9, 1000.0 * (base.duration_s + base.drain_s + 60)));

  const int repeats = static_cast<int>(c.GetInt("repeats"));

  // ---- run the grid
  std::unique_ptr<tune::Service> svc;
  std::string group, group_fail, group_status;
  std::string running_mode;
  for (Trial& t : trials) {
    const std::string g = absl::StrCat(t.kv, "/", t.batch);
    if (g != group) {
      svc.reset();
      group = g;
      group_fail.clear();
      running_mode.clear();
      svc = std::make_unique<tune::Service>(bins, log_dir, absl::StrCat("kv-", t.kv, "-batch-", t.batch, "-"));
      std::fprintf(stderr, "tune: starting workers: kv %s, batch %d\n", t.kv.c_str(), t.batch);
      const tune::StartResult r =
          svc->StartWorkers(worker_keys(t, false), draft.empty() ? KeyValues{} : worker_keys(t, true), start_timeout);
      if (r.outcome != tune::StartOutcome::kOk) {
        group_status = r.outcome == tune::StartOutcome::kDoesNotFit ? "does not fit" : "failed to start";
        group_fail = r.message;
        std::fprintf(stderr, "tune: %s: %s\n", group_status.c_str(), r.message.c_str());
      }
    }
    if (!group_fail.empty()) {
      t.status = group_status;
      t.note = group_fail.substr(0, 300);
      continue;
    }
    if (running_mode != t.mode.Name()) {
      running_mode = t.mode.Name();
      const tune::StartResult r = svc->StartCoordinator(coordinator_keys(t.mode), start_timeout);
      if (r.outcome != tune::StartOutcome::kOk) {
        t.status = r.outcome == tune::StartOutcome::kDoesNotFit ? "does not fit" : "failed to start";
        t.note = r.message.substr(0, 300);
        running_mode.clear();
        std::fprintf(stderr, "tune: trial %d: %s: %s\n", t.id, t.status.c_str(), r.message.c_str());
        continue;
      }
    }
    loadgen::LoadSpec s = base;
    s.coordinator = svc->coordinator_address();
    s.sampling.temperature = static_cast<float>(t.temperature);
    s.verify_greedy = c.GetBool("verify-greedy") && t.temperature == 0 && t.mode.k > 0;
    std::fprintf(stderr, "tune: trial %d/%zu: kv %s, batch %d, %s, temperature %g\n", t.id, trials.size(),
                 t.kv.c_str(), t.batch, t.mode.Name().c_str(), t.temperature);
    // Repeats: the run with the median throughput stands for the trial; an
    // error in any run marks it.
    std::vector<loadgen::LoadReport> runs;
    absl::Status run_error;
    for (int i = 0; i < repeats && run_error.ok(); ++i) {
      if (i > 0) s.warmup_requests = 0;
      auto rep = loadgen::RunLoad(s);
      if (!rep.ok()) run_error = rep.status();
      else runs.push_back(std::move(*rep));
    }
    if (!run_error.ok()) {
      t.status = "errors";
      t.note = std::string(run_error.message()).substr(0, 300);
      running_mode.clear();  // restart the coordinator for the next trial
      svc->StopCoordinator();
      continue;
    }
    std::string bad_note;
    for (const auto& r : runs) {
      if (!bad_note.empty()) break;
      if (!r.failure_examples.empty()) bad_note = r.failure_examples[0];
      else if (r.failed > 0 || r.lost > 0) bad_note = absl::StrCat(r.failed + r.lost, " requests failed or lost");
      else if (r.verify_mismatches > 0) bad_note = absl::StrCat(r.verify_mismatches, " greedy mismatches");
      else if (r.ok == 0) bad_note = "no request completed";
    }
    std::sort(runs.begin(), runs.end(), [](const loadgen::LoadReport& a, const loadgen::LoadReport& b) {
      return a.output_tokens_per_s < b.output_tokens_per_s;
    });
    t.rep = std::move(runs[runs.size() / 2]);
    const bool bad = !bad_note.empty();
    t.status = bad ? "errors" : "ok";
    t.note = bad_note;
    std::fprintf(stderr, "tune:   %.1f tok/s, %.2f req/s, TTFT p50 %.1f ms, request p50 %.1f ms, acceptance %.1f%%%s\n",
                 t.rep.output_tokens_per_s, t.rep.requests_per_s, t.rep.ttft_ms.p50, t.rep.total_ms.p50,
                 100.0 * t.rep.acceptance_rate, bad ? (" — " + t.note).c_str() : "");
  }
  svc.reset();

  // ---- the best configuration: every trial of it ok, score averaged over temperatures
  struct Score {
    double value = 0;
    int n = 0;
    bool valid = true;
  };
  std::map<std::string, Score> scores;
  const double ttft_cap = c.GetDouble("max-ttft-p99-ms");
  for (const Trial& t : trials) {
    Score& s = scores[t.ConfigKey()];
    if (t.status != "ok" || (ttft_cap > 0 && t.rep.ttft_ms.p99 > ttft_cap)) s.valid = false;
    s.value += objective == "throughput" ? t.rep.output_tokens_per_s : -t.rep.total_ms.p50;
    ++s.n;
  }
  std::string best_key;
  double best_value = -1e300;
  for (const Trial& t : trials) {  // in grid order: ties go to the earlier (simpler) one
    const Score& s = scores[t.ConfigKey()];
    if (!s.valid || s.n == 0) continue;
    const double v = s.value / s.n;
    if (v > best_value) {
      best_value = v;
      best_key = t.ConfigKey();
    }
  }
  const Trial* best = nullptr;
  for (Trial& t : trials) {
    if (t.ConfigKey() == best_key) {
      t.best = true;
      if (!best) best = &t;
    }
  }

  std::string command = "specd tune";
  for (const auto& a : args) command += " " + a;
  const std::string table = MarkdownTable(trials);
  std::printf("%s", table.c_str());
  std::ostringstream md;
  md << "# specd tune\n\n```\n" << command << "\n```\n\n"
     << absl::StrFormat("Workload: concurrency %d, prompt tokens %s, max tokens %s%s, %.1f s per trial. "
                        "Objective: %s.\n\n",
                        base.concurrency, loadgen::FormatRange(base.prompt_tokens),
                        loadgen::FormatRange(base.max_tokens), base.ignore_eos ? " (eos ignored)" : "",
                        base.duration_s, objective)
     << table;
  if (!WriteFile(out_dir + "/trials.md", md.str()) ||
      !WriteFile(out_dir + "/trials.json",
                 TrialsJson(trials, command, best_key, objective,
                            {{"concurrency", base.concurrency},
                             {"prompt_tokens", loadgen::FormatRange(base.prompt_tokens)},
                             {"max_tokens", loadgen::FormatRange(base.max_tokens)},
                             {"ignore_eos", base.ignore_eos},
                             {"trial_seconds", base.duration_s},
                             {"repeats", repeats},
                             {"max_seq_len", max_seq_len}})))
    return Fail("cannot write the trial tables in " + out_dir);
  if (!best) {
    std::fprintf(stderr, "tune: no configuration completed every trial without errors; no config files written "
                         "(see %s/trials.md and %s)\n", out_dir.c_str(), log_dir.c_str());
    return 1;
  }

  // ---- the config files
  std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  const double best_score = scores[best_key].value / std::max(1, scores[best_key].n);
  const std::string header = absl::StrFormat(
      "Written by specd tune on %s: the best of %d trials (objective: %s).\n"
      "kv %s, batch %d, speculation %s: %s (mean over temperatures %s)\n"
      "workload: concurrency %d, prompt tokens %s, max tokens %s; every trial in trials.md",
      date, static_cast<int>(trials.size()), objective, best->kv, best->batch, best->mode.Name(),
      objective == "throughput" ? absl::StrFormat("%.1f output tokens/s", best_score)
                                : absl::StrFormat("p50 request time %.1f ms", -best_score),
      c.GetString("temperatures"), base.concurrency, loadgen::FormatRange(base.prompt_tokens),
      loadgen::FormatRange(base.max_tokens));
  KeyValues tk = worker_keys(*best, false), dk = draft.empty() ? KeyValues{} : worker_keys(*best, true);
  KeyValues ck = coordinator_keys(best->mode);
  tune::SetKey(&tk, "listen", c.GetString("listen-target"));
  if (!draft.empty()) tune::SetKey(&dk, "listen", c.GetString("listen-draft"));
  ck.insert(ck.begin(), {{"listen", c.GetString("listen-coordinator")},
                         {"target", c.GetString("listen-target")},
                         {"draft", draft.empty() ? "" : c.GetString("listen-draft")}});
  const std::string tconf = out_dir + "/target.conf", dconf = out_dir + "/draft.conf",
                    cconf = out_dir + "/coordinator.conf";
  if (!WriteFile(tconf, tune::ToConfigFile(tk, header)) || !WriteFile(cconf, tune::ToConfigFile(ck, header)) ||
      (!draft.empty() && !WriteFile(dconf, tune::ToConfigFile(dk, header))))
    return Fail("cannot write the config files in " + out_dir);
  std::printf("\nbest: kv %s, batch %d, %s — %.1f output tokens/s, request p50 %.1f ms\n", best->kv.c_str(),
              best->batch, best->mode.Name().c_str(), best->rep.output_tokens_per_s, best->rep.total_ms.p50);
  std::printf("wrote %s, %s%s%s, %s/trials.md, %s/trials.json\n", tconf.c_str(), draft.empty() ? "" : dconf.c_str(),
              draft.empty() ? "" : ", ", cconf.c_str(), out_dir.c_str(), out_dir.c_str());

  // ---- the files must start the services as they are
  if (c.GetBool("check-config")) {
    tune::Service check(bins, log_dir, "config-check-");
    const tune::StartResult r =
        check.StartFromConfigFiles(tconf, draft.empty() ? "" : dconf, cconf, start_timeout);
    if (r.outcome != tune::StartOutcome::kOk) return Fail("the written config files do not start the services: " + r.message);
    loadgen::LoadSpec s = base;
    s.coordinator = check.coordinator_address();
    s.duration_s = 0;
    s.requests = std::max(2, base.concurrency);
    s.warmup_requests = 0;
    s.sampling.temperature = 0;
    s.verify_greedy = best->mode.k > 0;
    auto rep = loadgen::RunLoad(s);
    if (!rep.ok()) return Fail("config check: " + std::string(rep.status().message()));
    if (rep->failed || rep->lost || rep->verify_mismatches || rep->ok != rep->sent)
      return Fail(absl::StrCat("config check: ", rep->failed, " failed, ", rep->verify_mismatches,
                               " greedy mismatches in ", rep->sent, " requests"));
    std::printf("config check: the services started from the written files and served %d requests%s\n",
                static_cast<int>(rep->ok), s.verify_greedy ? " (greedy output equal to target-only)" : "");
  }
  return 0;
}

#endif

}  // namespace specd::cli
