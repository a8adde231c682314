// specd loadgen: concurrent streaming requests against a coordinator;
// reports throughput, latency percentiles, speculation figures and (with
// --verify-greedy) whether every output equals its target-only reference.
#include <cstdio>
#include <fstream>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "common/util/log.h"

#if defined(SPECD_HAVE_CLIENT)
#include "cli/loadgen_lib.h"
#include "proto/rpc/security.h"
#endif

namespace specd::cli {

#if !defined(SPECD_HAVE_CLIENT)
int Loadgen(const std::vector<std::string>&) { return Fail("this build has no coordinator client"); }
#else

namespace {

absl::StatusOr<std::vector<std::string>> ReadPrompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot open prompts file '" + path + "'");
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) out.push_back(line);
  }
  if (out.empty()) return absl::InvalidArgumentError("prompts file '" + path + "' has no non-empty line");
  return out;
}

}  // namespace

int Loadgen(const std::vector<std::string>& args) {
  Config c("specd loadgen");
  c.AddString("coordinator", "127.0.0.1:7810", "coordinator address (host:port or unix:PATH)");
  AddConnectFlags(&c);
  c.AddInt("concurrency", 4, "requests in flight at once", 1, 4096);
  c.AddInt("requests", 0, "measured requests (0: as many as --duration-s allows)", 0, 1ll << 40);
  c.AddDouble("duration-s", 0, "stop issuing requests after this many seconds (0: no time bound)", 0, 1e7);
  c.AddDouble("drain-s", 30, "cancel requests still running this long after --duration-s", 0, 1e7);
  c.AddDouble("wait-s", 10, "wait up to this long for the coordinator to be serving (0: don't wait)", 0, 3600);
  c.AddString("prompt-tokens", "32:256", "synthesized prompt length in tokens: N or MIN:MAX (uniform)");
  c.AddString("max-tokens", "16:128", "max_tokens per request: N or MIN:MAX (uniform)");
  c.AddString("prompts-file", "", "text prompts, one per line (instead of synthesized ones)");
  c.AddInt("distinct-prompts", 16, "synthesized prompts (each with its own length and max_tokens)", 1, 100000);
  c.AddInt("seed", 1, "workload seed (prompts, lengths, mix); request i samples with seed+i", 0, INT64_MAX);
  c.AddDouble("temperature", 0.0, "sampling temperature (0: greedy)", 0.0, 100.0);
  c.AddDouble("top-p", 1.0, "nucleus probability (1: off)", 1e-6, 1.0);
  c.AddInt("top-k", 0, "top-k (0: off)", 0, 1 << 24);
  c.AddDouble("min-p", 0.0, "min-p (0: off)", 0.0, 0.999);
  c.AddInt("k", 0, "draft tokens per step for every request (unset: the coordinator's)", 0, 64);
  c.AddString("adaptive", "", "on: the speculation length is chosen per step (--k: the cap); off: fixed k; "
                             "empty: the coordinator's");
  c.AddBool("no-speculation", false, "target-only decoding for every request");
  c.AddString("spec-mix", "", "instead: each request draws a mode from this list: default, off, adaptive, kN (fixed "
                              "k=N), aN (adaptive up to N); e.g. k2,k4,a8,off");
  c.AddDouble("min-confidence", 0.0, "stop proposals below this draft probability (0: the coordinator's)", 0.0, 1.0);
  c.AddBool("ignore-eos", false, "generate max_tokens tokens regardless of end-of-generation tokens");
  c.AddString("stop", "", "stop string for a --stop-fraction of the prompts");
  c.AddDouble("stop-fraction", 1.0, "fraction of the prompts that carry --stop", 0.0, 1.0);
  c.AddDouble("cancel-fraction", 0.0, "fraction of the requests the client cancels mid-stream", 0.0, 1.0);
  c.AddString("cancel-after-chunks", "1:4", "cancel after this many streamed chunks: N or MIN:MAX");
  c.AddDouble("deadline-fraction", 0.0, "fraction of the requests sent with a short deadline", 0.0, 1.0);
  c.AddString("deadline-ms", "500", "the short deadline in ms: N or MIN:MAX");
  c.AddInt("timeout-ms", 300000, "deadline of every other request (each call is bounded)", 1, 1ll << 40);
  c.AddInt("warmup", 0, "unmeasured requests first", 0, 1 << 20);
  c.AddBool("verify-greedy", false,
            "first a target-only reference per prompt; then check every output equals it (temperature 0)");
  c.AddString("json", "", "also write the report as JSON to this file");
  c.AddBool("quiet", false, "no progress lines on stderr");
  if (int rc = ParseOrExit(c, args); rc >= 0) return rc;
  if (!c.positional().empty()) return Fail("unexpected argument '" + c.positional()[0] + "'");

  loadgen::LoadSpec s;
  s.coordinator = c.GetString("coordinator");
  auto key = rpc::ApiKeyFromConfig(c);
  if (!key.ok()) return Fail(key.status());
  s.api_key = *key;
  s.tls_ca = c.GetString("tls-ca");
  s.concurrency = static_cast<int>(c.GetInt("concurrency"));
  s.requests = c.GetInt("requests");
  s.duration_s = c.GetDouble("duration-s");
  s.drain_s = c.GetDouble("drain-s");
  s.wait_serving_s = c.GetDouble("wait-s");
  if (s.requests == 0 && s.duration_s == 0) return Fail("give --requests N, --duration-s T, or both");
  auto pt = loadgen::ParseRange(c.GetString("prompt-tokens"), 1, 1 << 20);
  if (!pt.ok()) return Fail(pt.status());
  auto mt = loadgen::ParseRange(c.GetString("max-tokens"), 1, 1 << 20);
  if (!mt.ok()) return Fail(mt.status());
  auto ca = loadgen::ParseRange(c.GetString("cancel-after-chunks"), 1, 1 << 20);
  if (!ca.ok()) return Fail(ca.status());
  auto dm = loadgen::ParseRange(c.GetString("deadline-ms"), 1, INT32_MAX);
  if (!dm.ok()) return Fail(dm.status());
  s.prompt_tokens = *pt;
  s.max_tokens = *mt;
  s.cancel_after_chunks = *ca;
  if (!c.GetString("prompts-file").empty()) {
    auto p = ReadPrompts(c.GetString("prompts-file"));
    if (!p.ok()) return Fail(p.status());
    s.prompts = std::move(*p);
  }
  s.distinct_prompts = static_cast<int>(c.GetInt("distinct-prompts"));
  s.seed = static_cast<uint64_t>(c.GetInt("seed"));
  s.sampling.temperature = static_cast<float>(c.GetDouble("temperature"));
  s.sampling.top_p = static_cast<float>(c.GetDouble("top-p"));
  s.sampling.top_k = static_cast<int32_t>(c.GetInt("top-k"));
  s.sampling.min_p = static_cast<float>(c.GetDouble("min-p"));
  s.sampling.seed = s.seed;
  if (c.IsSet("k")) s.k = static_cast<int>(c.GetInt("k"));
  if (c.GetString("adaptive") == "on") s.adaptive = true;
  else if (c.GetString("adaptive") == "off") s.adaptive = false;
  else if (!c.GetString("adaptive").empty()) return Fail("--adaptive takes on or off");
  s.disable_speculation = c.GetBool("no-speculation");
  if (auto st = loadgen::ParseSpecMix(c.GetString("spec-mix"), &s); !st.ok()) return Fail(st);
  s.min_confidence = static_cast<float>(c.GetDouble("min-confidence"));
  s.ignore_eos = c.GetBool("ignore-eos");
  if (!c.GetString("stop").empty()) {
    s.stop.push_back(c.GetString("stop"));
    s.stop_fraction = c.GetDouble("stop-fraction");
  }
  s.cancel_fraction = c.GetDouble("cancel-fraction");
  s.deadline_fraction = c.GetDouble("deadline-fraction");
  s.deadline_ms = *dm;
  s.request_timeout_ms = static_cast<int>(std::min<int64_t>(c.GetInt("timeout-ms"), INT32_MAX));
  s.warmup_requests = static_cast<int>(c.GetInt("warmup"));
  s.verify_greedy = c.GetBool("verify-greedy");
  if (!c.GetBool("quiet")) s.log = [](const std::string& m) { std::fprintf(stderr, "loadgen: %s\n", m.c_str()); };

  auto r = loadgen::RunLoad(s);
  if (!r.ok()) return Fail(r.status());
  std::printf("%s", loadgen::FormatReport(*r).c_str());
  if (!c.GetString("json").empty()) {
    std::ofstream out(c.GetString("json"));
    out << loadgen::ReportToJson(*r, s);
    if (!out) return Fail("cannot write " + c.GetString("json"));
  }
  // Non-zero when something went wrong, so scripts and CI can tell.
  return (r->failed > 0 || r->lost > 0 || r->verify_mismatches > 0 || r->reference_failures > 0) ? 1 : 0;
}

#endif

}  // namespace specd::cli
