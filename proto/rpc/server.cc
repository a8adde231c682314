#include "proto/rpc/server.h"

#include <signal.h>

#include <cstdio>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "common/util/log.h"
#include "common/util/sd_notify.h"

namespace specd::rpc {

void AddServiceFlags(Config* cfg, const std::string& default_listen) {
  cfg->AddString("listen", default_listen, "gRPC listen address: HOST:PORT (loopback by default) or unix:/PATH");
  cfg->AddString("log-level", "info", "log level: debug, info, warn, error");
}

void AddSchedulerFlags(Config* cfg, const std::string& batch_help) {
  cfg->AddInt("max-batch", 64, batch_help, 1, 4096);
  cfg->AddInt("prefill-chunk", 256,
              "prompt tokens prefilled per scheduler round, between batches (a long prompt never stalls the "
              "running sequences for longer than one chunk)",
              1, 1 << 20);
  cfg->AddInt("batch-wait-us", 0,
              "wait up to this long before a batch while fewer jobs are pending than in the last one (0: never)", 0,
              1000000);
}

SchedulerOptions SchedulerFromConfig(const Config& cfg) {
  SchedulerOptions o;
  o.max_batch = static_cast<int>(cfg.GetInt("max-batch"));
  o.prefill_chunk = cfg.GetInt("prefill-chunk");
  o.batch_wait = std::chrono::microseconds(cfg.GetInt("batch-wait-us"));
  return o;
}

absl::StatusOr<bool> ParseServiceFlags(Config* cfg, int argc, char** argv, const std::string& component) {
  SetLogComponent(component);
  SPECD_RETURN_IF_ERROR(cfg->Parse(argc, argv));
  if (cfg->help_requested()) {
    std::cout << cfg->Usage();
    return false;
  }
  if (!cfg->positional().empty())
    return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", cfg->positional()[0], "'"));
  LogLevel level;
  if (!ParseLogLevel(cfg->GetString("log-level"), &level))
    return absl::InvalidArgumentError(absl::StrCat("bad --log-level '", cfg->GetString("log-level"), "'"));
  SetLogLevel(level);
  SPECD_RETURN_IF_ERROR(CheckListenAddress(cfg->GetString("listen")));
  return true;
}

absl::Status CheckListenAddress(const std::string& addr) {
  if (absl::StartsWith(addr, "unix:")) {
    if (addr.size() <= 5) return absl::InvalidArgumentError("listen address 'unix:' needs a path");
    return absl::OkStatus();
  }
  if (absl::StartsWith(addr, "unix-abstract:")) return absl::OkStatus();
  const size_t colon = addr.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 || !absl::SimpleAtoi(addr.substr(colon + 1), &port) || port < 0 ||
      port > 65535)
    return absl::InvalidArgumentError(absl::StrCat("bad listen address '", addr, "' (HOST:PORT or unix:/PATH)"));
  const std::string host = addr.substr(0, colon);
  if (host != "127.0.0.1" && host != "localhost" && host != "[::1]")
    SPECD_LOG(WARN) << "listening beyond loopback: the API has no authentication" << Kv("listen", addr);
  return absl::OkStatus();
}

int ExitWith(const std::string& program, const absl::Status& st, int code) {
  std::fprintf(stderr, "%s: %s\n", program.c_str(), std::string(st.message()).c_str());
  return code;
}

void ServeUntilTerminated(grpc::Server* server, const std::string& status) {
  // Type=notify units: the service counts as started only now (model loaded,
  // port bound), so units ordered after this one start when it can serve.
  if (auto st = SdNotify("READY=1\nSTATUS=" + status); !st.ok())
    SPECD_LOG(WARN) << "systemd readiness notification failed" << Kv("error", st.ToString());
  const int sig = WaitForTermination();
  SPECD_LOG(INFO) << "shutting down" << Kv("signal", sig);
  SdNotify("STOPPING=1").IgnoreError();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
}

void BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForTermination() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  return sig;
}

absl::StatusOr<std::unique_ptr<grpc::Server>> StartServer(const std::string& listen,
                                                          const std::vector<grpc::Service*>& services,
                                                          int* bound_port) {
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  b.SetMaxReceiveMessageSize(64 << 20);
  for (grpc::Service* s : services) b.RegisterService(s);
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  if (!server) return absl::UnavailableError(absl::StrCat("cannot listen on '", listen, "' (address in use?)"));
  if (bound_port) *bound_port = port;
  return server;
}

}  // namespace specd::rpc
