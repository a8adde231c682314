// specd-draft-worker: hosts the draft model; answers Propose with tokens and
// leaves their probabilities in its exchange buffer for the target.
#include "absl/strings/str_cat.h"
#include "common/shm/posix_shared_buffer.h"
#include "common/util/log.h"
#include "draft_worker/draft_service.h"
#include "proto/rpc/server.h"

namespace specd {
namespace {

constexpr char kProgram[] = "specd-draft-worker";

int Main(int argc, char** argv) {
  rpc::BlockTerminationSignals();
  Config cfg(kProgram);
  EngineOptions::AddFlags(&cfg);
  rpc::AddServiceFlags(&cfg, "127.0.0.1:7812");
  cfg.AddInt("k-max", 8, "longest proposal (exchange-buffer rows per slot)", 1, ExchangeBuffer::kMaxK);
  cfg.AddString("shm-kind", "auto",
                "exchange buffer: auto (CUDA IPC device rows with --backend cuda, else posix), posix, or cuda");
  rpc::AddSchedulerFlags(&cfg, "sequences per batched Propose");
  EngineOptions::AddShareWeightsFlag(
      &cfg, "auto: map the tensors a target on the same GPU holds identically (a draft derived from it) instead of "
            "loading a second copy, else load an own copy (logged); off: always an own copy");
  auto run = rpc::ParseServiceFlags(&cfg, argc, argv, "draft-worker");
  if (!run.ok()) return rpc::ExitWith(kProgram, run.status(), 2);
  if (!*run) return 0;
  cfg.LogEffective();
  auto eo = EngineOptions::FromConfig(cfg);
  if (!eo.ok()) return rpc::ExitWith(kProgram, eo.status(), 2);
  auto share = EngineOptions::ShareWeightsFromConfig(cfg, EngineOptions::ShareWeights::kImport);
  if (!share.ok()) return rpc::ExitWith(kProgram, share.status(), 2);
  eo->share_weights = *share;
  DraftWorkerOptions o;
  o.engine = *eo;
  o.k_max = static_cast<int>(cfg.GetInt("k-max"));
  o.shm_kind = cfg.GetString("shm-kind");
  o.scheduler = rpc::SchedulerFromConfig(cfg);
  PosixSharedBuffer::RemoveStale();  // left by a crashed draft (every kind has a POSIX part)
  auto service = DraftService::Create(o);
  if (!service.ok()) return rpc::ExitWith(kProgram, service.status(), 1);
  int port = 0;
  auto sec = rpc::ServerSecurityFromConfig(cfg);
  if (!sec.ok()) return rpc::ExitWith(kProgram, sec.status(), 2);
  auto server = rpc::StartServer(cfg.GetString("listen"), {service->get()}, *sec, eo->max_seqs, &port);
  if (!server.ok()) return rpc::ExitWith(kProgram, server.status(), 1);
  const v1::InfoResponse info = (*service)->CurrentInfo();
  SPECD_LOG(INFO) << "serving" << Kv("listen", cfg.GetString("listen")) << Kv("port", port)
                  << Kv("model", info.model_name()) << Kv("exchange", info.exchange().name())
                  << Kv("exchange_kind", info.exchange().kind());
  rpc::SetHealth(server->get(), v1::DraftWorker::service_full_name(), true);
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
