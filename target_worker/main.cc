// specd-target-worker: hosts the target model; verifies the draft's
// proposals (read from the draft's exchange buffer) in one batched forward.
#include <cstdio>

#include "common/util/log.h"
#include "proto/rpc/server.h"
#include "target_worker/target_service.h"

namespace specd {
namespace {

int Main(int argc, char** argv) {
  rpc::BlockTerminationSignals();
  Config cfg("specd-target-worker");
  EngineOptions::AddFlags(&cfg);
  rpc::AddServiceFlags(&cfg, "127.0.0.1:7811");
  cfg.AddInt("max-batch", 64, "sequences per batched Verify", 1, 4096);
  auto run = rpc::ParseServiceFlags(&cfg, argc, argv, "target-worker");
  if (!run.ok()) {
    std::fprintf(stderr, "specd-target-worker: %s\n", std::string(run.status().message()).c_str());
    return 2;
  }
  if (!*run) return 0;
  cfg.LogEffective();
  TargetWorkerOptions o;
  auto eo = EngineOptions::FromConfig(cfg);
  if (!eo.ok()) {
    std::fprintf(stderr, "specd-target-worker: %s\n", std::string(eo.status().message()).c_str());
    return 2;
  }
  o.engine = *eo;
  o.max_batch = static_cast<int>(cfg.GetInt("max-batch"));
  auto service = TargetService::Create(o);
  if (!service.ok()) {
    SPECD_LOG(ERROR) << "cannot start" << Kv("error", service.status().ToString());
    std::fprintf(stderr, "specd-target-worker: %s\n", std::string(service.status().message()).c_str());
    return 1;
  }
  int port = 0;
  auto server = rpc::StartServer(cfg.GetString("listen"), {service->get()}, &port);
  if (!server.ok()) {
    SPECD_LOG(ERROR) << "cannot start" << Kv("error", server.status().ToString());
    return 1;
  }
  const v1::InfoResponse info = (*service)->CurrentInfo();
  SPECD_LOG(INFO) << "serving" << Kv("listen", cfg.GetString("listen")) << Kv("port", port)
                  << Kv("model", info.model_name());
  const int sig = rpc::WaitForTermination();
  SPECD_LOG(INFO) << "shutting down" << Kv("signal", sig);
  (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return 0;
}

}  // namespace
}  // namespace specd

int main(int argc, char** argv) { return specd::Main(argc, argv); }
