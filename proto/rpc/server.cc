#include "proto/rpc/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include <cstdio>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "common/util/log.h"
#include "common/util/net.h"
#include "common/util/sd_notify.h"

namespace specd::rpc {

void AddServiceFlags(Config* cfg, const std::string& default_listen) {
  cfg->AddString("listen", default_listen, "gRPC listen address: HOST:PORT (loopback by default) or unix:/PATH");
  cfg->AddString("log-level", "info", "log level: debug, info, warn, error");
  AddServerSecurityFlags(cfg);
}

void AddSchedulerFlags(Config* cfg, const std::string& batch_help) {
  cfg->AddInt("max-batch", 64, batch_help, 1, 4096);
  cfg->AddInt("prefill-chunk", SchedulerOptions{}.prefill_chunk,
              "prompt tokens prefilled per scheduler round, between batches (a long prompt never stalls the "
              "running sequences for longer than one chunk)",
              1, 1 << 20);
  // The coordinator's lockstep (--lockstep) sends a step's calls together;
  // they still reach the engine thread microseconds apart, and without a wait
  // the first would start a forward alone.
  cfg->AddInt("batch-wait-us", 1000,
              "calls without a lockstep cohort: wait up to this long before a batch while fewer sequences have a "
              "job pending than in the last two batches (0: never)",
              0, 1000000);
  // The coordinator says how many calls each step's cohort sends, so the
  // wait ends as soon as they are all in; the bound covers a member that
  // dropped out after the gate (cancelled, its prefill first, a failed call).
  cfg->AddInt("cohort-wait-us", SchedulerOptions{}.cohort_wait.count(),
              "wait up to this long before a batch for the rest of a lockstep cohort's calls (0: never)", 0,
              1000000);
}

SchedulerOptions SchedulerFromConfig(const Config& cfg) {
  SchedulerOptions o;
  o.max_batch = static_cast<int>(cfg.GetInt("max-batch"));
  o.prefill_chunk = cfg.GetInt("prefill-chunk");
  o.batch_wait = std::chrono::microseconds(cfg.GetInt("batch-wait-us"));
  o.cohort_wait = std::chrono::microseconds(cfg.GetInt("cohort-wait-us"));
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
  return ParseHostPort(addr).status();
}

Deadline CallDeadline(const grpc::ServerContext& ctx) {
  const Deadline d = ctx.deadline();
  return d - std::chrono::system_clock::now() > std::chrono::hours(24 * 365) ? kNoDeadline : d;
}

Deadline StreamDeadline(Deadline d) {
  if (d == kNoDeadline) return d;
  const auto left = d - std::chrono::system_clock::now();
  if (left <= std::chrono::system_clock::duration::zero()) return d;
  return d - std::min<std::chrono::system_clock::duration>(std::chrono::milliseconds(200), left / 10);
}

int ExitWith(const std::string& program, const absl::Status& st, int code) {
  std::fprintf(stderr, "%s: %s\n", program.c_str(), std::string(st.message()).c_str());
  return code;
}

std::chrono::microseconds WatchdogInterval() {
  const char* usec = std::getenv("WATCHDOG_USEC");
  const char* pid = std::getenv("WATCHDOG_PID");
  int64_t us = 0;
  if (!usec || !absl::SimpleAtoi(usec, &us) || us <= 0) return std::chrono::microseconds(0);
  int64_t p = 0;
  if (pid && *pid && (!absl::SimpleAtoi(pid, &p) || p != getpid())) return std::chrono::microseconds(0);
  return std::chrono::microseconds(us / 2);
}

void ServeUntilTerminated(grpc::Server* server, const ServeOptions& opts) {
  // Type=notify units: the service counts as started only now (model loaded,
  // port bound), so units ordered after this one start when it can serve.
  if (auto st = SdNotify("READY=1\nSTATUS=" + opts.status); !st.ok())
    SPECD_LOG(WARN) << "systemd readiness notification failed" << Kv("error", st.ToString());
  const auto watchdog = std::chrono::duration_cast<std::chrono::milliseconds>(WatchdogInterval());
  if (watchdog.count() > 0) SPECD_LOG(INFO) << "systemd watchdog on" << Kv("ping_ms", watchdog.count());
  const auto tick = opts.on_tick ? opts.tick : std::chrono::milliseconds(1000);
  auto next_ping = std::chrono::steady_clock::now();
  int sig = 0;
  while (true) {
    if (watchdog.count() > 0 && std::chrono::steady_clock::now() >= next_ping) {
      if (!opts.alive || opts.alive()) {
        SdNotify("WATCHDOG=1").IgnoreError();
      } else {
        SPECD_LOG(WARN) << "not responsive: systemd watchdog ping withheld";
      }
      next_ping = std::chrono::steady_clock::now() + watchdog;
    }
    if (opts.on_tick) opts.on_tick();
    const auto wait = watchdog.count() > 0 ? std::min(tick, watchdog) : tick;
    if ((sig = WaitForTermination(wait)) != 0) break;
  }
  SPECD_LOG(INFO) << "shutting down" << Kv("signal", sig);
  SdNotify("STOPPING=1").IgnoreError();
  if (grpc::HealthCheckServiceInterface* h = server->GetHealthCheckService()) h->Shutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
}

void BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForTermination(std::chrono::milliseconds timeout) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const auto left = std::max<std::chrono::nanoseconds>(end - std::chrono::steady_clock::now(), {});
    timespec ts{static_cast<time_t>(left.count() / 1000000000), static_cast<long>(left.count() % 1000000000)};
    const int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig > 0) return sig;
    if (errno == EAGAIN) return 0;  // timed out (EINTR: try again)
  }
}

absl::StatusOr<std::unique_ptr<grpc::Server>> StartServer(const std::string& listen,
                                                          const std::vector<grpc::Service*>& services,
                                                          const ServerSecurity& sec, int concurrent_calls,
                                                          int* bound_port) {
  SPECD_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> creds, MakeServerCredentials(sec));
  WarnIfExposed(listen, !sec.api_key.empty(), !sec.tls_cert.empty(), "gRPC");
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort(listen, creds, &port);
  // gRPC binds with SO_REUSEPORT on Linux by default: a second service started
  // on a port already in use would bind too, and the kernel would split the
  // connections between them (a draft worker answering the target's calls).
  // Without it the second start fails, saying so.
  b.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  b.SetMaxReceiveMessageSize(64 << 20);
  if (concurrent_calls > 0) {
    // The synchronous server polls with 1 to 2 threads by default: a call
    // that finds no idle poller spawns one, and after the call a thread past
    // the second exits. A worker's lockstep step is one call per sequence
    // at once, so each step created and ended sequences - 2 threads, one
    // after another as each call was picked up (six target-only streams on
    // the CPU here: 22% of a step's transport). Enough pollers to hold a
    // step's calls (and one more for Info, health, Open) keep them alive.
    b.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, concurrent_calls + 1);
    b.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, concurrent_calls + 4);
  }
  for (grpc::Service* s : services) b.RegisterService(s);
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  if (!server) return absl::UnavailableError(absl::StrCat("cannot listen on '", listen, "' (address in use?)"));
  if (bound_port) *bound_port = port;
  return server;
}

void SetHealth(grpc::Server* server, const std::string& service, bool serving) {
  if (grpc::HealthCheckServiceInterface* h = server->GetHealthCheckService()) h->SetServingStatus(service, serving);
}

}  // namespace specd::rpc
