// specd-coordinator: the public gRPC API. Runs the speculative loop per
// request against a draft worker and a target worker.
#include "absl/strings/str_cat.h"
#include "common/api/http_api.h"
#include "common/util/log.h"
#include "coordinator/frontend.h"
#include "proto/rpc/server.h"

namespace specd {
namespace {

constexpr char kProgram[] = "specd-coordinator";

int Main(int argc, char** argv) {
  rpc::BlockTerminationSignals();
  Config cfg(kProgram);
  rpc::AddServiceFlags(&cfg, "127.0.0.1:7810");
  cfg.AddString("target", "127.0.0.1:7811", "target worker address (HOST:PORT or unix:/PATH)");
  cfg.AddString("draft", "127.0.0.1:7812",
                "draft worker address; empty: no draft (target-only, or n-gram proposals with --proposer ngram)");
  cfg.AddString("tokenizer-model", "", "GGUF to read the target's vocabulary from (empty: the target's model path)");
  cfg.AddInt("k", 4, "draft tokens per step in fixed mode (--no-adaptive, or requests that set k)", 1, 64);
  cfg.AddBool("adaptive", true,
              "choose the speculation length per request and step from acceptance and measured costs, up to "
              "--draft-max, falling back to target-only when drafting does not pay");
  cfg.AddInt("draft-max", 8, "adaptive mode: most draft tokens per step (also capped by the draft's --k-max)", 1, 64);
  cfg.AddBool("speculation", true, "use the draft (false: target-only decoding)");
  cfg.AddString("acceptance-prior", "",
                "adaptive mode: the acceptance prior new requests start from until the service has learned its own "
                "(the 'acceptance prior' line of specd stats or bench-spec; empty: none)");
  cfg.AddDouble("min-confidence", -1.0,
                "the draft stops a proposal below this top probability (0: never; -1: 0 in fixed mode, learned in "
                "adaptive mode)",
                -1.0, 1.0);
  api::AddProposerFlags(&cfg);
  cfg.AddInt("max-batch", 0, "requests generating at once (0: the target's --max-seqs)", 0, 4096);
  cfg.AddInt("max-queue", 64, "requests waiting for admission; more are refused with RESOURCE_EXHAUSTED", 0, 1 << 20);
  cfg.AddInt("max-seq-len", 0,
             "per-request context, prompt + output (0: the target's); max_tokens is clamped to fit", 0, 1 << 20);
  cfg.AddString("http-listen", "",
                "OpenAI-compatible HTTP API HOST:PORT (/v1/completions, /v1/chat/completions, /v1/models, /health, "
                "/metrics); empty: off, e.g. 127.0.0.1:8080");
  cfg.AddString("worker-api-key", "", "the key the workers require (empty: this coordinator's --api-key)");
  cfg.AddString("worker-api-key-file", "", "read --worker-api-key from this file");
  cfg.AddString("worker-tls-ca", "", "talk TLS to the workers, verifying their certificates against these PEM roots");
  cfg.AddInt("http-threads", 64, "HTTP connections served at once (each streaming request holds one)", 1, 4096);
  cfg.AddInt("default-max-tokens", 256, "max_tokens of requests that do not set it", 1, 1 << 20);
  cfg.AddInt("max-tokens-limit", 8192, "largest max_tokens a request may ask for", 1, 1 << 20);
  cfg.AddInt("target-wait-ms", 30000, "how long a request without a deadline waits for the target", 0, 3600000);
  cfg.AddInt("draft-timeout-ms", 2000, "per Propose call; slower means target-only for that step", 1, 600000);
  cfg.AddInt("draft-open-timeout-ms", 30000, "per draft prefill call", 1, 3600000);
  cfg.AddInt("target-timeout-ms", 60000, "per target Open/Verify call", 1, 3600000);
  cfg.AddInt("draft-retry-ms", 250, "back-off before a request retries a failed draft", 1, 600000);
  cfg.AddInt("probe-interval-ms", 500, "how often the workers are probed (reconnects, swaps)", 10, 600000);
  cfg.AddInt("probe-timeout-ms", 3000, "per probe (Info) call", 1, 600000);
  cfg.AddInt("swap-timeout-ms", 300000, "longest draft model load during a swap", 1, 3600000);
  cfg.AddBool("lockstep", true,
              "keep concurrent requests' steps in phase (each step's proposals, then its verifies, start together), "
              "so that the workers batch them into one forward");
  cfg.AddBool("pipeline-verify", true,
              "send each step's Verify together with its Propose: the target takes the proposal from the draft's "
              "exchange buffer as soon as it is published, instead of after the coordinator has it back");
  cfg.AddString("warmup", "auto",
                "when the workers are new (start, restart, draft swap), run each speculation length's step once greedy "
                "and once sampled before requests pay their first runs (auto: where a worker's backend prepares batch "
                "shapes, CUDA graphs; always; off)");
  cfg.AddBool("batch-calls", true,
              "send a lockstep step's calls to each worker as one message (when the worker takes them), instead of "
              "one call per request");
  cfg.AddInt("batch-calls-wait-us", 1000,
             "longest a step's message waits for the calls of its requests still to come (they then go alone)", 0,
             1000000);
  cfg.AddInt("lockstep-max-wait-ms", 100,
             "longest a step waits for a lagging request (the wait is 2x the usual step, at most this)", 1, 10000);
  auto run = rpc::ParseServiceFlags(&cfg, argc, argv, "coordinator");
  if (!run.ok()) return rpc::ExitWith(kProgram, run.status(), 2);
  if (!*run) return 0;
  cfg.LogEffective();
  auto sec = rpc::ServerSecurityFromConfig(cfg);
  if (!sec.ok()) return rpc::ExitWith(kProgram, sec.status(), 2);
  auto worker_key = rpc::ApiKeyFromConfig(cfg, "worker-");
  if (!worker_key.ok()) return rpc::ExitWith(kProgram, worker_key.status(), 2);
  using ms = std::chrono::milliseconds;
  ClusterOptions co;
  co.target_address = cfg.GetString("target");
  co.draft_address = cfg.GetString("draft");
  co.tokenizer_model = cfg.GetString("tokenizer-model");
  co.probe_interval = ms(cfg.GetInt("probe-interval-ms"));
  co.probe_timeout = ms(cfg.GetInt("probe-timeout-ms"));
  co.swap_timeout = ms(cfg.GetInt("swap-timeout-ms"));
  co.security.api_key = worker_key->empty() ? sec->api_key : *worker_key;
  co.security.tls_ca = cfg.GetString("worker-tls-ca");
  for (const std::string& a : {co.target_address, co.draft_address}) {
    if (a.empty()) continue;
    if (absl::Status st = rpc::CheckListenAddress(a); !st.ok()) return rpc::ExitWith(kProgram, st, 2);
  }
  if (co.target_address.empty()) return rpc::ExitWith(kProgram, absl::InvalidArgumentError("--target is required"), 2);
  FrontendOptions fo;
  fo.k = static_cast<int>(cfg.GetInt("k"));
  fo.adaptive = cfg.GetBool("adaptive");
  fo.draft_max = static_cast<int>(cfg.GetInt("draft-max"));
  fo.speculation = cfg.GetBool("speculation");
  fo.min_confidence = static_cast<float>(cfg.GetDouble("min-confidence"));
  fo.acceptance_prior = cfg.GetString("acceptance-prior");
  {
    api::SpecDefaults d;
    if (absl::Status st = api::ProposerFromFlags(cfg, &d); !st.ok()) return rpc::ExitWith(kProgram, st, 2);
    fo.proposer = d.proposer;
    fo.ngram = d.ngram;
  }
  fo.max_batch = static_cast<int>(cfg.GetInt("max-batch"));
  fo.max_queue = static_cast<int>(cfg.GetInt("max-queue"));
  fo.max_seq_len = static_cast<int>(cfg.GetInt("max-seq-len"));
  fo.default_max_tokens = static_cast<int>(cfg.GetInt("default-max-tokens"));
  fo.max_tokens_limit = static_cast<int>(cfg.GetInt("max-tokens-limit"));
  fo.target_wait = ms(cfg.GetInt("target-wait-ms"));
  fo.draft_retry = ms(cfg.GetInt("draft-retry-ms"));
  fo.timeouts.draft = ms(cfg.GetInt("draft-timeout-ms"));
  fo.timeouts.draft_open = ms(cfg.GetInt("draft-open-timeout-ms"));
  fo.timeouts.target = ms(cfg.GetInt("target-timeout-ms"));
  fo.lockstep = cfg.GetBool("lockstep");
  fo.pipeline_verify = cfg.GetBool("pipeline-verify");
  {
    auto wm = ParseWarmupMode(cfg.GetString("warmup"));
    if (!wm.ok()) return rpc::ExitWith(kProgram, wm.status(), 2);
    fo.warmup = *wm;
  }
  fo.batch_calls = cfg.GetBool("batch-calls");
  fo.batch_calls_wait = std::chrono::microseconds(cfg.GetInt("batch-calls-wait-us"));
  fo.lockstep_gate.max_wait = ms(cfg.GetInt("lockstep-max-wait-ms"));
  if (fo.default_max_tokens > fo.max_tokens_limit)
    return rpc::ExitWith(kProgram, absl::InvalidArgumentError("--default-max-tokens exceeds --max-tokens-limit"), 2);

  auto cluster = Cluster::Create(co);
  if (!cluster.ok()) return rpc::ExitWith(kProgram, cluster.status(), 2);
  (*cluster)->Start();
  Frontend frontend(cluster->get(), fo);
  if (absl::Status st = frontend.status(); !st.ok()) return rpc::ExitWith(kProgram, st, 2);
  CoordinatorService public_api(&frontend);
  AdminService admin(&frontend);
  std::unique_ptr<api::HttpApi> http;
  if (!cfg.GetString("http-listen").empty()) {
    api::HttpApiOptions ho;
    ho.listen = cfg.GetString("http-listen");
    ho.threads = static_cast<int>(cfg.GetInt("http-threads"));
    ho.api_key = sec->api_key;
    ho.tls_cert = sec->tls_cert;
    ho.tls_key = sec->tls_key;
    rpc::WarnIfExposed(ho.listen, !ho.api_key.empty(), !ho.tls_cert.empty(), "HTTP");
    api::HttpApiHooks hooks;
    hooks.model = [&] { return frontend.ModelName(); };
    hooks.ready = [&] { return frontend.TargetReady(); };
    hooks.metrics = [&] { return frontend.RenderMetrics(); };
    hooks.token_text = [&](int32_t id) { return frontend.TokenText(id); };
    auto h = api::HttpApi::Start(ho, &frontend, std::move(hooks));
    if (!h.ok()) return rpc::ExitWith(kProgram, h.status(), 1);
    http = std::move(*h);
    SPECD_LOG(INFO) << "HTTP API" << Kv("listen", ho.listen) << Kv("port", http->port())
                    << Kv("paths", "/v1/completions /v1/chat/completions /v1/models /health /metrics");
  }
  int port = 0;
  // A request holds its call for its whole life: no per-step thread churn to avoid.
  auto server = rpc::StartServer(cfg.GetString("listen"), {&public_api, &admin}, *sec, 0, &port);
  if (!server.ok()) return rpc::ExitWith(kProgram, server.status(), 1);
  SPECD_LOG(INFO) << "serving" << Kv("listen", cfg.GetString("listen")) << Kv("port", port)
                  << Kv("target", co.target_address) << Kv("draft", co.draft_address)
                  << Kv("proposer", api::ProposerName(fo.proposer)) << Kv("ngram", fo.ngram.ToString());
  rpc::ServeOptions so;
  so.status = absl::StrCat("serving on ", cfg.GetString("listen"), " (target ", co.target_address, ")");
  // grpc.health.v1: the coordinator serves while its target is up; the
  // draft's state under the draft service's name.
  grpc::Server* srv = server->get();
  so.on_tick = [&frontend, srv] {
    const bool target = frontend.TargetReady();
    rpc::SetHealth(srv, "", target);
    rpc::SetHealth(srv, v1::Coordinator::service_full_name(), target);
    rpc::SetHealth(srv, v1::Admin::service_full_name(), true);
    rpc::SetHealth(srv, v1::DraftWorker::service_full_name(), frontend.DraftReady());
  };
  so.on_tick();
  rpc::ServeUntilTerminated(srv, so);
  return 0;
}

}  // namespace
}  // namespace specd

int main(int argc, char** argv) { return specd::Main(argc, argv); }
