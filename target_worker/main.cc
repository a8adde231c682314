// specd-target-worker: hosts the target model; verifies the draft's
// proposals (read from the draft's exchange buffer) in one batched forward.
#include "absl/strings/str_cat.h"
#include "common/util/log.h"
#include "proto/rpc/server.h"
#include "target_worker/target_service.h"

namespace specd {
namespace {

constexpr char kProgram[] = "specd-target-worker";

int Main(int argc, char** argv) {
  rpc::BlockTerminationSignals();
  Config cfg(kProgram);
  EngineOptions::AddFlags(&cfg);
  rpc::AddServiceFlags(&cfg, "127.0.0.1:7811");
  rpc::AddSchedulerFlags(&cfg, "sequences per batched Verify");
  cfg.AddString("exchange-path", "auto",
                "auto: accept on the GPU through CUDA IPC when the draft exports device rows and --backend is cuda; "
                "host: always read the draft's host rows");
  EngineOptions::AddShareWeightsFlag(
      &cfg, "auto: on a GPU, keep the weights in one allocation that a draft worker on the same GPU can map "
            "(tensors it holds identically: a draft derived from this target) and publish their digests; off: do not");
  auto run = rpc::ParseServiceFlags(&cfg, argc, argv, "target-worker");
  if (!run.ok()) return rpc::ExitWith(kProgram, run.status(), 2);
  if (!*run) return 0;
  cfg.LogEffective();
  auto eo = EngineOptions::FromConfig(cfg);
  if (!eo.ok()) return rpc::ExitWith(kProgram, eo.status(), 2);
  auto share = EngineOptions::ShareWeightsFromConfig(cfg, EngineOptions::ShareWeights::kExport);
  if (!share.ok()) return rpc::ExitWith(kProgram, share.status(), 2);
  eo->share_weights = *share;
  eo->role = "target";
  TargetWorkerOptions o;
  o.engine = *eo;
  o.scheduler = rpc::SchedulerFromConfig(cfg);
  const std::string path = cfg.GetString("exchange-path");
  if (path != "auto" && path != "host")
    return rpc::ExitWith(kProgram, absl::InvalidArgumentError("--exchange-path takes auto or host"), 2);
  o.prefer_host = path == "host";
  auto service = TargetService::Create(o);
  if (!service.ok()) return rpc::ExitWith(kProgram, service.status(), 1);
  int port = 0;
  auto sec = rpc::ServerSecurityFromConfig(cfg);
  if (!sec.ok()) return rpc::ExitWith(kProgram, sec.status(), 2);
  auto server = rpc::StartServer(cfg.GetString("listen"), {service->get()}, *sec, eo->max_seqs, &port);
  if (!server.ok()) return rpc::ExitWith(kProgram, server.status(), 1);
  const v1::InfoResponse info = (*service)->CurrentInfo();
  SPECD_LOG(INFO) << "serving" << Kv("listen", cfg.GetString("listen")) << Kv("port", port)
                  << Kv("model", info.model_name());
  rpc::SetHealth(server->get(), v1::TargetWorker::service_full_name(), true);
  rpc::ServeOptions so;
  so.status = absl::StrCat("serving ", info.model_name(), " on ", cfg.GetString("listen"));
  // The watchdog's liveness: the engine thread takes a task (a hung forward does not).
  const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(rpc::WatchdogInterval() / 2);
  so.alive = [&] { return (*service)->Responsive(wait); };
  rpc::ServeUntilTerminated(server->get(), so);
  return 0;
}

}  // namespace
}  // namespace specd

int main(int argc, char** argv) { return specd::Main(argc, argv); }
