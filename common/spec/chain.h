// Proposers tried in order at each step: the first that proposes at least
// one token makes the step's proposal (e.g. n-gram prompt lookup where the
// text repeats itself, the draft model otherwise). Each member keeps its own
// copy of the committed sequence; a member that sat out steps is synced with
// what it missed when it is asked next (Propose carries the sync), so each
// behaves as if it were alone. A member that fails is reopened at its next
// turn; the chain fails only when every member did.
//
// Used as one request's proposer (the loop's, one call at a time).
#pragma once
#include <map>
#include <vector>

#include "common/spec/proposer.h"

namespace specd {

class ProposerChain : public Proposer {
 public:
  // The members, first to ask first; they must outlive the chain.
  explicit ProposerChain(std::vector<Proposer*> members) : members_(std::move(members)) {}

  absl::Status Open(int32_t seq, const std::vector<int32_t>& tokens, const SamplingParams& sampling,
                    Deadline deadline) override;
  absl::StatusOr<Proposal> Propose(const ProposeRequest& req, Deadline deadline) override;
  void Release(int32_t seq) override;
  bool OpensBesideTheTarget() const override;

  // Proposals each member made that were not empty.
  const std::vector<int64_t>& proposals_by_member() const { return made_; }

 private:
  struct Member {
    bool open = false;
    int64_t synced = 0;  // committed tokens the member holds
  };
  struct Seq {
    std::vector<int32_t> committed;
    SamplingParams sampling;
    std::vector<Member> members;
  };
  std::vector<Proposer*> members_;
  std::map<int32_t, Seq> seqs_;
  std::vector<int64_t> made_ = std::vector<int64_t>(members_.size(), 0);
};

}  // namespace specd
