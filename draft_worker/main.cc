// specd-draft-worker: hosts the draft model; answers Propose with tokens and
// leaves their probabilities in its exchange buffer for the target.
#include <cstdio>

#include "common/shm/posix_shared_buffer.h"
#include "common/util/log.h"
#include "draft_worker/draft_service.h"
#include "proto/rpc/server.h"

namespace specd {
namespace {

int Main(int argc, char** argv) {
  rpc::BlockTerminationSignals();
  Config cfg("specd-draft-worker");
  EngineOptions::AddFlags(&cfg);
  rpc::AddServiceFlags(&cfg, "127.0.0.1:7812");
  cfg.AddInt("k-max", 8, "longest proposal (exchange-buffer rows per slot)", 1, ExchangeBuffer::kMaxK);
  cfg.AddString("shm-kind", "posix", "exchange-buffer implementation: posix");
  cfg.AddInt("max-batch", 64, "sequences per batched Propose", 1, 4096);
  auto run = rpc::ParseServiceFlags(&cfg, argc, argv, "draft-worker");
  if (!run.ok()) {
    std::fprintf(stderr, "specd-draft-worker: %s\n", std::string(run.status().message()).c_str());
    return 2;
  }
  if (!*run) return 0;
  cfg.LogEffective();
  DraftWorkerOptions o;
  auto eo = EngineOptions::FromConfig(cfg);
  if (!eo.ok()) {
    std::fprintf(stderr, "specd-draft-worker: %s\n", std::string(eo.status().message()).c_str());
    return 2;
  }
  o.engine = *eo;
  o.k_max = static_cast<int>(cfg.GetInt("k-max"));
  o.shm_kind = cfg.GetString("shm-kind");
  o.max_batch = static_cast<int>(cfg.GetInt("max-batch"));
  if (o.shm_kind == "posix") PosixSharedBuffer::RemoveStale();
  auto service = DraftService::Create(o);
  if (!service.ok()) {
    SPECD_LOG(ERROR) << "cannot start" << Kv("error", service.status().ToString());
    std::fprintf(stderr, "specd-draft-worker: %s\n", std::string(service.status().message()).c_str());
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
                  << Kv("model", info.model_name()) << Kv("exchange", info.exchange().name());
  const int sig = rpc::WaitForTermination();
  SPECD_LOG(INFO) << "shutting down" << Kv("signal", sig);
  (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return 0;
}

}  // namespace
}  // namespace specd

int main(int argc, char** argv) { return specd::Main(argc, argv); }
