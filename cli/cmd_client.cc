// Admin subcommands that talk to a running coordinator (generate and chat
// are in cmd_generate.cc). Wired to the gRPC client library when it is built
// (coordinator/client).
#include <cstdio>

#include "cli/cli_util.h"
#include "cli/commands.h"

#if defined(SPECD_HAVE_CLIENT)
#include "common/util/log.h"
#include "coordinator/client/client.h"
#include "proto/rpc/security.h"
#endif

namespace specd::cli {

#if !defined(SPECD_HAVE_CLIENT)
int Stats(const std::vector<std::string>&) { return Fail("this build has no coordinator client"); }
int SwapDraft(const std::vector<std::string>&) { return Fail("this build has no coordinator client"); }
#else

namespace {

constexpr char kDefaultCoordinator[] = "127.0.0.1:7810";

}  // namespace

absl::StatusOr<std::unique_ptr<client::Client>> ConnectFromFlags(const Config& c) {
  client::ConnectOptions o;
  SPECD_ASSIGN_OR_RETURN(o.api_key, rpc::ApiKeyFromConfig(c));
  o.tls_ca = c.GetString("tls-ca");
  return client::Client::Connect(c.GetString("coordinator"), o);
}

int Stats(const std::vector<std::string>& args) {
  Config c("specd stats");
  c.AddString("coordinator", kDefaultCoordinator, "coordinator address (host:port or unix:PATH)");
  AddConnectFlags(&c);
  c.AddInt("k", 0, "set the coordinator's fixed k for new requests and select fixed mode (0: leave)", 0, 64);
  c.AddString("speculation", "", "on/off: turn speculation on or off (empty: leave)");
  c.AddString("adaptive", "", "on/off: choose k per step, or use the fixed k (empty: leave)");
  c.AddInt("draft-max", 0, "set adaptive mode's most drafts per step (0: leave)", 0, 64);
  if (int rc = ParseOrExit(c, args); rc >= 0) return rc;
  auto cl = ConnectFromFlags(c);
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
  AddConnectFlags(&c);
  c.AddString("model", "", "new draft GGUF (path on the draft worker's machine; or the first argument)");
  if (int rc = ParseOrExit(c, args); rc >= 0) return rc;
  std::string path = c.GetString("model");
  if (path.empty() && !c.positional().empty()) path = c.positional()[0];
  if (path.empty()) return Fail("usage: specd swap-draft [--coordinator ADDR] NEW_DRAFT.gguf");
  auto cl = ConnectFromFlags(c);
  if (!cl.ok()) return Fail(cl.status());
  auto w = (*cl)->SwapDraft(path);
  if (!w.ok()) return Fail(w.status());
  std::printf("draft is now %s (%s, vocab %d), exchange %s\n", w->model_name.c_str(), w->model_path.c_str(),
              w->vocab_size, w->exchange.c_str());
  return 0;
}

#endif

}  // namespace specd::cli
