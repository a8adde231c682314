// Subcommands that talk to a running coordinator. Wired to the gRPC client
// library when it is built (coordinator/client).
#include <cstdio>

#include "cli/cli_util.h"
#include "cli/commands.h"

#if defined(SPECD_HAVE_CLIENT)
#include "common/util/log.h"
#include "coordinator/client/client.h"
#endif

namespace specd::cli {

#if !defined(SPECD_HAVE_CLIENT)
int GenerateRemote(const Config&) { return Fail("this build has no coordinator client"); }
int Chat(const std::vector<std::string>&) { return Fail("this build has no coordinator client"); }
int Stats(const std::vector<std::string>&) { return Fail("this build has no coordinator client"); }
int SwapDraft(const std::vector<std::string>&) { return Fail("this build has no coordinator client"); }
#else

void AddSamplingFlags(Config* c);                    // cmd_generate.cc
SamplingParams SamplingFromConfig(const Config& c);  // cmd_generate.cc

namespace {

constexpr char kDefaultCoordinator[] = "127.0.0.1:7810";

absl::StatusOr<std::unique_ptr<client::Client>> ConnectTo(const Config& c) {
  return client::Client::Connect(c.GetString("coordinator"));
}

// Streams one request and prints text as it comes, then the summary line on stderr.
int RunStream(const Config& c, client::GenerateParams p) {
  auto cl = ConnectTo(c);
  if (!cl.ok()) return Fail(cl.status());
  p.max_tokens = static_cast<int>(c.GetInt("max-tokens"));
  p.sampling = SamplingFromConfig(c);
  if (c.Has("k") && c.IsSet("k")) p.k = static_cast<int>(c.GetInt("k"));
  if (c.Has("adaptive") && c.IsSet("adaptive")) p.adaptive = c.GetBool("adaptive");
  if (c.Has("no-speculation")) p.disable_speculation = c.GetBool("no-speculation");
  if (c.Has("ignore-eos")) p.ignore_eos = c.GetBool("ignore-eos");
  if (c.Has("stop") && !c.GetString("stop").empty()) p.stop.push_back(c.GetString("stop"));
  if (c.Has("timeout-ms") && c.GetInt("timeout-ms") > 0) p.timeout = std::chrono::milliseconds(c.GetInt("timeout-ms"));
  auto sum = (*cl)->Generate(p, [](const client::StreamChunk& ch) {
    std::fputs(ch.text.c_str(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::printf("\n");
  if (!sum.ok()) return Fail(sum.status());
  if (c.Has("print-ids") && c.GetBool("print-ids")) {
    std::printf("ids:");
    for (int32_t t : sum->tokens) std::printf(" %d", t);
    std::printf("\n");
  }
  std::fprintf(stderr, "%s\n", client::FormatSummary(*sum).c_str());
  return 0;
}

void AddRemoteFlags(Config* c) {
  c->AddString("stop", "", "stop string (generation ends before it)");
  c->AddBool("no-speculation", false, "target-only decoding for this request");
  c->AddInt("timeout-ms", 0, "request deadline (0: none)", 0, 1ll << 40);
}

}  // namespace

int GenerateRemote(const Config& c) {
  if (c.GetString("prompt").empty()) return Fail("--prompt is required (and must not be empty)");
  client::GenerateParams p;
  if (c.GetBool("chat")) {
    if (!c.GetString("system").empty()) p.messages.push_back({"system", c.GetString("system")});
    p.messages.push_back({"user", c.GetString("prompt")});
  } else {
    p.prompt = c.GetString("prompt");
  }
  return RunStream(c, std::move(p));
}

int Chat(const std::vector<std::string>& args) {
  Config c("specd chat");
  AddSamplingFlags(&c);
  AddRemoteFlags(&c);
  c.AddString("coordinator", kDefaultCoordinator, "coordinator address (host:port or unix:PATH)");
  c.AddInt("k", 4, "draft tokens proposed per step (default: the coordinator's)", 0, 64);
  if (int rc = ParseOrExit(c, args); rc >= 0) return rc;
  if (c.GetString("prompt").empty()) return Fail("--prompt (the user message) is required");
  client::GenerateParams p;
  if (!c.GetString("system").empty()) p.messages.push_back({"system", c.GetString("system")});
  p.messages.push_back({"user", c.GetString("prompt")});
  return RunStream(c, std::move(p));
}

int Stats(const std::vector<std::string>& args) {
  Config c("specd stats");
  c.AddString("coordinator", kDefaultCoordinator, "coordinator address (host:port or unix:PATH)");
  c.AddInt("k", 0, "set the coordinator's fixed k for new requests and select fixed mode (0: leave)", 0, 64);
  c.AddString("speculation", "", "on/off: turn speculation on or off (empty: leave)");
  c.AddString("adaptive", "", "on/off: choose k per step, or use the fixed k (empty: leave)");
  c.AddInt("draft-max", 0, "set adaptive mode's most drafts per step (0: leave)", 0, 64);
  if (int rc = ParseOrExit(c, args); rc >= 0) return rc;
  auto cl = ConnectTo(c);
  if (!cl.ok()) return Fail(cl.status());
  std::optional<int> k;
  std::optional<bool> on;
  if (c.GetInt("k") > 0) k = static_cast<int>(c.GetInt("k"));
  const std::string sp = c.GetString("speculation");
  if (sp == "on") on = true;
  else if (sp == "off") on = false;
  else if (!sp.empty()) return Fail("--speculation takes on or off");
  std::optional<bool> adaptive;
  std::optional<int> draft_max;
  const std::string ad = c.GetString("adaptive");
  if (ad == "on") adaptive = true;
  else if (ad == "off") adaptive = false;
  else if (!ad.empty()) return Fail("--adaptive takes on or off");
  if (c.GetInt("draft-max") > 0) draft_max = static_cast<int>(c.GetInt("draft-max"));
  if (k || on || adaptive || draft_max) {
    auto r = (*cl)->SetSpeculation(k, on, adaptive, draft_max);
    if (!r.ok()) return Fail(r.status());
  }
  auto s = (*cl)->GetStats();
  if (!s.ok()) return Fail(s.status());
  std::printf("%s", client::FormatStats(*s).c_str());
  return 0;
}

int SwapDraft(const std::vector<std::string>& args) {
  Config c("specd swap-draft");
  c.AddString("coordinator", kDefaultCoordinator, "coordinator address (host:port or unix:PATH)");
  c.AddString("model", "", "new draft GGUF (path on the draft worker's machine; or the first argument)");
  if (int rc = ParseOrExit(c, args); rc >= 0) return rc;
  std::string path = c.GetString("model");
  if (path.empty() && !c.positional().empty()) path = c.positional()[0];
  if (path.empty()) return Fail("usage: specd swap-draft [--coordinator ADDR] NEW_DRAFT.gguf");
  auto cl = ConnectTo(c);
  if (!cl.ok()) return Fail(cl.status());
  auto w = (*cl)->SwapDraft(path);
  if (!w.ok()) return Fail(w.status());
  std::printf("draft is now %s (%s, vocab %d), exchange %s\n", w->model_name.c_str(), w->model_path.c_str(),
              w->vocab_size, w->exchange.c_str());
  return 0;
}

#endif

}  // namespace specd::cli
