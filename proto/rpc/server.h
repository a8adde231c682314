// Start-up and shutdown shared by the three services.
#pragma once
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/engine/scheduler.h"
#include "common/spec/loop.h"
#include "common/util/config.h"
#include "proto/rpc/security.h"

namespace specd::rpc {

// Declares --listen (default `default_listen`), --log-level and the
// security flags (security.h).
void AddServiceFlags(Config* cfg, const std::string& default_listen);

// The workers' scheduler flags: --max-batch (`batch_help`), --prefill-chunk,
// --batch-wait-us, --cohort-wait-us.
void AddSchedulerFlags(Config* cfg, const std::string& batch_help);
SchedulerOptions SchedulerFromConfig(const Config& cfg);

// Parses argv (and --config), sets the log component and level. Returns
// false after printing usage for --help (the caller exits 0).
absl::StatusOr<bool> ParseServiceFlags(Config* cfg, int argc, char** argv, const std::string& component);

// Accepts "unix:/path", "unix-abstract:name" and "host:port" (ports 0..65535;
// 0 lets the kernel choose).
absl::Status CheckListenAddress(const std::string& addr);

// A call's deadline (gRPC reports "none" as a time far in the future).
Deadline CallDeadline(const grpc::ServerContext& ctx);
// A little before `d` (the margin a stream needs for its last message).
Deadline StreamDeadline(Deadline d);

// For main(): prints "program: message" on stderr, returns `code`.
int ExitWith(const std::string& program, const absl::Status& st, int code);

// Blocks SIGINT/SIGTERM in the calling thread; call before any thread starts
// so that every thread inherits the mask and WaitForTermination receives them.
void BlockTerminationSignals();
// Waits up to `timeout` for SIGINT or SIGTERM; returns the signal number, or
// 0 when the time ran out.
int WaitForTermination(std::chrono::milliseconds timeout);

// Builds and starts a server on `listen` with `services` and `sec`, plus
// the standard grpc.health.v1.Health service (the server SERVING until
// SetHealth says otherwise) and server reflection (grpcurl,
// grpc_health_probe). `concurrent_calls` (> 0): the calls the server
// usually holds at once (a worker: one batched call per sequence), for which
// it keeps threads polling. `bound_port` (optional) receives the TCP port bound.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartServer(const std::string& listen,
                                                          const std::vector<grpc::Service*>& services,
                                                          const ServerSecurity& sec, int concurrent_calls,
                                                          int* bound_port = nullptr);
// The health of `service` ("" is the whole server) as grpc.health.v1 reports it.
void SetHealth(grpc::Server* server, const std::string& service, bool serving);

struct ServeOptions {
  std::string status = "serving";  // the systemd status line
  // Checked before each systemd watchdog ping (WATCHDOG=1 every half
  // $WATCHDOG_USEC): false withholds the ping, so a hung process is
  // restarted. Unset: always alive.
  std::function<bool()> alive;
  // Called every `tick` while serving (health updates).
  std::function<void()> on_tick;
  std::chrono::milliseconds tick{250};
};

// Tells systemd the service is ready (Type=notify), pings its watchdog
// while serving, waits for SIGINT/SIGTERM, then marks every service
// NOT_SERVING and shuts `server` down (in-flight calls get 5 s).
void ServeUntilTerminated(grpc::Server* server, const ServeOptions& opts);

// The systemd watchdog's ping interval: half of $WATCHDOG_USEC when it is
// set for this process ($WATCHDOG_PID unset or ours); zero when off.
std::chrono::microseconds WatchdogInterval();

}  // namespace specd::rpc
