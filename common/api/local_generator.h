// The request API in process: a target engine and an optional draft engine
// in this process, the same speculative loop the coordinator runs
// (common/spec/loop.h) on LocalTarget / LocalDraft. `specd generate`
// without --coordinator uses it. One request at a time (the engines are not
// thread-safe); measured step costs and acceptance carry over between
// requests, as in the coordinator.
#pragma once
#include <memory>
#include <mutex>

#include "common/api/request.h"
#include "common/engine/engine.h"
#include "common/engine/spec_local.h"

namespace specd::api {

class LocalGenerator : public Generator {
 public:
  // Loads the target (and the draft, when `draft_path` is not empty) with
  // `opts`; `spec` gives the speculation settings of requests that do not
  // set their own.
  static absl::StatusOr<std::unique_ptr<LocalGenerator>> Create(const EngineOptions& opts,
                                                                const std::string& draft_path,
                                                                const SpecDefaults& spec, const Limits& limits = {});

  absl::StatusOr<Summary> Generate(const Request& req, const EventFn& on_event = {}) override;
  absl::StatusOr<std::vector<int32_t>> Tokenize(const std::string& text, bool add_special = true,
                                                bool parse_special = false) override;
  const Tokenizer& tokenizer() const { return target_engine_->tokenizer(); }
  // The acceptance adaptive requests start from: loaded (AcceptancePrior::Load
  // text, e.g. the 'acceptance prior' line of specd stats), then learned.
  absl::Status LoadAcceptancePrior(const std::string& text);
  // (That of requests with `kind`'s proposals: n-gram proposals alone learn their own.)
  std::string AcceptancePriorText(ProposerKind kind = ProposerKind::kDraft);
  // The step costs those requests' policy reads (SpecCosts::ToString).
  std::string CostsText(ProposerKind kind = ProposerKind::kDraft);
  // The engines (the draft's null without a draft), for their backends' figures.
  const Engine& target_engine() const { return *target_engine_; }
  const Engine* draft_engine() const { return draft_engine_.get(); }

 private:
  LocalGenerator() = default;
  // Requests of this proposer use the n-gram table and prior (no draft model).
  bool NgramOnly(ProposerKind kind) const;
  std::mutex mu_;
  SpecDefaults spec_;
  Limits limits_;
  std::unique_ptr<Engine> target_engine_, draft_engine_;
  std::unique_ptr<LocalTarget> target_;
  std::unique_ptr<LocalDraft> draft_;
  SpecCosts costs_;
  AcceptancePrior prior_;
  SpecCosts ngram_costs_;  // requests with n-gram proposals alone (SeedModelFreeCosts)
  AcceptancePrior ngram_prior_;
};

}  // namespace specd::api
