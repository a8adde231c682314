// Start-up and shutdown shared by the three services.
#pragma once
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "common/util/config.h"
#include "common/engine/scheduler.h"

namespace specd::rpc {

// Declares --listen (default `default_listen`) and --log-level.
void AddServiceFlags(Config* cfg, const std::string& default_listen);

// The workers' scheduler flags: --max-batch (`batch_help`), --prefill-chunk,
// --batch-wait-us.
void AddSchedulerFlags(Config* cfg, const std::string& batch_help);
SchedulerOptions SchedulerFromConfig(const Config& cfg);

// Parses argv (and --config), sets the log component and level. Returns
// false after printing usage for --help (the caller exits 0).
absl::StatusOr<bool> ParseServiceFlags(Config* cfg, int argc, char** argv, const std::string& component);

// Accepts "unix:/path", "unix-abstract:name" and "host:port" (ports 0..65535;
// 0 lets the kernel choose). Non-loopback hosts are allowed but logged.
absl::Status CheckListenAddress(const std::string& addr);

// For main(): prints "program: message" on stderr, returns `code`.
int ExitWith(const std::string& program, const absl::Status& st, int code);

// Blocks SIGINT/SIGTERM in the calling thread; call before any thread starts
// so that every thread inherits the mask and WaitForTermination receives them.
void BlockTerminationSignals();
// Waits for SIGINT or SIGTERM; returns the signal number.
int WaitForTermination();

// Builds and starts a server on `listen` with `services`. `bound_port`
// (optional) receives the TCP port actually bound.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartServer(const std::string& listen,
                                                          const std::vector<grpc::Service*>& services,
                                                          int* bound_port = nullptr);

// Tells systemd the service is ready (Type=notify; `status` becomes the unit's
// status line), waits for SIGINT/SIGTERM, then shuts `server` down (in-flight
// calls get 5 s).
void ServeUntilTerminated(grpc::Server* server, const std::string& status = "serving");

}  // namespace specd::rpc
