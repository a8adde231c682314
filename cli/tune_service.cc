#include "cli/tune_service.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "common/util/net.h"
#include "coordinator/client/client.h"
#include "nlohmann/json.hpp"

namespace specd::tune {
namespace {

using Clock = std::chrono::steady_clock;

bool IsExecutable(const std::string& p) {
  struct stat st {};
  return !p.empty() && stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
}

std::string SelfDir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  std::string p(buf, static_cast<size_t>(n));
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? "" : p.substr(0, slash);
}

// Something listens on 127.0.0.1:port.
bool Listening(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

int PortOf(const std::string& addr) {
  auto hp = ParseHostPort(addr);
  return hp.ok() ? hp->port : 0;
}

std::string Loopback(int port) { return "127.0.0.1:" + std::to_string(port); }

// The error a process printed before exiting: its last non-empty lines
// that are not structured log lines, else the last lines.
std::string ErrorOf(const std::string& log) {
  std::vector<std::string> lines = absl::StrSplit(log, '\n', absl::SkipWhitespace());
  std::string out;
  for (size_t i = lines.size(); i-- > 0 && out.size() < 600;) {
    if (absl::StartsWith(lines[i], "specd-")) {  // "specd-target-worker: <error>"
      out = lines[i];
      for (size_t j = i + 1; j < lines.size() && out.size() < 1200; ++j) out += " | " + lines[j];
      return out;
    }
  }
  for (size_t i = lines.size() >= 3 ? lines.size() - 3 : 0; i < lines.size(); ++i) out += (out.empty() ? "" : " | ") + lines[i];
  return out;
}

}  // namespace

absl::StatusOr<std::string> FindBinary(const std::string& name, const std::string& bin_dir) {
  if (!bin_dir.empty()) {
    const std::string p = bin_dir + "/" + name;
    if (IsExecutable(p)) return p;
    return absl::NotFoundError("no executable " + p);
  }
  const std::string self = SelfDir();
  std::vector<std::string> cands;
  if (!self.empty()) {
    cands.push_back(self + "/" + name);
    // The build tree: build/cli/specd next to build/coordinator/specd-coordinator.
    for (const char* sub : {"coordinator", "target_worker", "draft_worker"})
      cands.push_back(self + "/../" + sub + "/" + name);
  }
  if (const char* path = std::getenv("PATH")) {
    for (const auto& d : absl::StrSplit(path, ':', absl::SkipEmpty())) cands.push_back(std::string(d) + "/" + name);
  }
  for (const auto& c : cands) {
    if (IsExecutable(c)) return c;
  }
  return absl::NotFoundError("cannot find " + name + " (next to specd, in the build tree or on PATH); use --bin-dir");
}

absl::StatusOr<std::set<std::string>> OptionsOf(const std::string& binary) {
  SPECD_ASSIGN_OR_RETURN(const std::string text, RunCapture({binary, "--help=json"}, std::chrono::seconds(30)));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  std::set<std::string> out;
  if (j.is_object() && j.contains("options") && j["options"].is_array()) {
    for (const auto& o : j["options"]) {
      if (o.is_object() && o.contains("name") && o["name"].is_string()) out.insert(o["name"].get<std::string>());
    }
  }
  if (out.empty()) return absl::FailedPreconditionError(binary + " --help=json listed no options");
  return out;
}

std::vector<std::string> ToFlags(const KeyValues& kv) {
  std::vector<std::string> out;
  // --name=value: the one form every option type takes (a bare "--flag true" is not a bool).
  for (const auto& [k, v] : kv) out.push_back("--" + k + "=" + v);
  return out;
}

std::string ToConfigFile(const KeyValues& kv, const std::string& header) {
  std::string out;
  for (const auto& line : absl::StrSplit(header, '\n', absl::SkipEmpty())) absl::StrAppend(&out, "# ", line, "\n");
  for (const auto& [k, v] : kv) absl::StrAppend(&out, k, " = ", v, "\n");
  return out;
}

std::string Lookup(const KeyValues& kv, const std::string& key) {
  std::string v;
  for (const auto& [k, x] : kv) {
    if (k == key) v = x;
  }
  return v;
}

void SetKey(KeyValues* kv, const std::string& key, const std::string& value) {
  for (auto& [k, v] : *kv) {
    if (k == key) {
      v = value;
      return;
    }
  }
  kv->emplace_back(key, value);
}

Service::Service(Binaries bins, std::string log_dir, std::string log_prefix)
    : bins_(std::move(bins)), log_dir_(std::move(log_dir)), log_prefix_(std::move(log_prefix)) {}

Service::~Service() { StopAll(); }

std::string Service::Log(const std::string& what) const { return log_dir_ + "/" + log_prefix_ + what + ".log"; }

StartResult Service::Failure(Subprocess& p, const std::string& what) {
  StartResult r;
  const std::string log = p.LogTail(8000);
  r.outcome = absl::StrContains(log, "does not fit") ? StartOutcome::kDoesNotFit : StartOutcome::kFailed;
  r.message = what + ": " + ErrorOf(log);
  return r;
}

StartResult Service::StartWorkers(const KeyValues& target, const KeyValues& draft, std::chrono::seconds timeout) {
  return StartWorkersArgs(ToFlags(target), draft.empty() ? std::vector<std::string>{} : ToFlags(draft), timeout);
}

StartResult Service::StartWorkersArgs(const std::vector<std::string>& target, const std::vector<std::string>& draft,
                                      std::chrono::seconds timeout) {
  StopAll();
  have_draft_ = !draft.empty();
  StartResult last;
  // A port taken between choosing it and binding it: try other ports.
  for (int attempt = 0; attempt < 3; ++attempt) {
    StopAll();
    target_address_ = Loopback(FreeLoopbackPort());
    draft_address_ = have_draft_ ? Loopback(FreeLoopbackPort()) : "";
    std::vector<std::string> ta = {bins_.target};
    ta.insert(ta.end(), target.begin(), target.end());
    ta.insert(ta.end(), {"--listen", target_address_});
    if (auto st = target_.Start(ta, Log("target")); !st.ok()) return {StartOutcome::kFailed, st.ToString()};
    if (have_draft_) {
      std::vector<std::string> da = {bins_.draft};
      da.insert(da.end(), draft.begin(), draft.end());
      da.insert(da.end(), {"--listen", draft_address_});
      if (auto st = draft_.Start(da, Log("draft")); !st.ok()) return {StartOutcome::kFailed, st.ToString()};
    }
    const auto end = Clock::now() + timeout;
    bool t_up = false, d_up = !have_draft_, retry = false;
    while (Clock::now() < end && !(t_up && d_up)) {
      if (!target_.Alive()) {
        last = Failure(target_, "target worker");
        retry = absl::StrContains(last.message, "cannot listen");
        break;
      }
      if (have_draft_ && !draft_.Alive()) {
        last = Failure(draft_, "draft worker");
        retry = absl::StrContains(last.message, "cannot listen");
        break;
      }
      t_up = t_up || Listening(PortOf(target_address_));
      d_up = d_up || Listening(PortOf(draft_address_));
      if (!(t_up && d_up)) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (t_up && d_up) return {StartOutcome::kOk, ""};
    if (!retry) {
      if (last.message.empty()) last = {StartOutcome::kFailed, absl::StrCat("workers not up within ", timeout.count(), " s")};
      StopAll();
      return last;
    }
  }
  StopAll();
  return last;
}

StartResult Service::StartCoordinator(const KeyValues& coordinator, std::chrono::seconds timeout) {
  return StartCoordinatorArgs(ToFlags(coordinator), timeout);
}

StartResult Service::StartCoordinatorArgs(const std::vector<std::string>& args, std::chrono::seconds timeout) {
  StartResult last;
  for (int attempt = 0; attempt < 3; ++attempt) {
    StopCoordinator();
    coordinator_address_ = Loopback(FreeLoopbackPort());
    std::vector<std::string> a = {bins_.coordinator};
    a.insert(a.end(), args.begin(), args.end());
    a.insert(a.end(), {"--listen", coordinator_address_, "--target", target_address_, "--draft", draft_address_});
    if (auto st = coordinator_.Start(a, Log("coordinator")); !st.ok()) return {StartOutcome::kFailed, st.ToString()};
    auto c = client::Client::Connect(coordinator_address_);
    if (!c.ok()) return {StartOutcome::kFailed, c.status().ToString()};
    client_ = std::move(*c);
    const auto end = Clock::now() + timeout;
    bool retry = false;
    while (Clock::now() < end) {
      if (!coordinator_.Alive()) {
        last = Failure(coordinator_, "coordinator");
        retry = absl::StrContains(last.message, "cannot listen");
        break;
      }
      if (!target_.Alive()) return Failure(target_, "target worker");
      if (have_draft_ && !draft_.Alive()) return Failure(draft_, "draft worker");
      auto h = client_->GetHealth(std::chrono::milliseconds(500), /*wait_for_ready=*/true);
      if (h.ok() && h->serving && (!have_draft_ || h->draft_ready)) return {StartOutcome::kOk, ""};
      last = {StartOutcome::kFailed, h.ok() ? std::string("coordinator not serving (target or draft not ready)")
                                            : "coordinator: " + h.status().ToString()};
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!retry) {
      if (Clock::now() >= end) last.message += absl::StrCat(" (waited ", timeout.count(), " s)");
      StopCoordinator();
      return last;
    }
  }
  StopCoordinator();
  return last;
}

StartResult Service::StartFromConfigFiles(const std::string& target_conf, const std::string& draft_conf,
                                          const std::string& coordinator_conf, std::chrono::seconds timeout) {
  StartResult r = StartWorkersArgs({"--config", target_conf},
                                   draft_conf.empty() ? std::vector<std::string>{}
                                                      : std::vector<std::string>{"--config", draft_conf},
                                   timeout);
  if (r.outcome != StartOutcome::kOk) return r;
  return StartCoordinatorArgs({"--config", coordinator_conf}, timeout);
}

void Service::StopCoordinator() {
  client_.reset();
  coordinator_.Stop();
}

void Service::StopAll() {
  StopCoordinator();
  draft_.Stop();
  target_.Stop();
}

}  // namespace specd::tune
