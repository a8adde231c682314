#include "common/spec/chain.h"

#include <algorithm>

namespace specd {

absl::Status ProposerChain::Open(int32_t seq, const std::vector<int32_t>& tokens, const SamplingParams& sampling,
                                 Deadline deadline) {
  Release(seq);
  Seq& s = seqs_[seq];
  s.committed = tokens;
  s.sampling = sampling;
  s.members.assign(members_.size(), Member{});
  absl::Status first_error;
  bool any = false;
  for (size_t i = 0; i < members_.size(); ++i) {
    absl::Status st = members_[i]->Open(seq, tokens, sampling, deadline);
    if (st.ok()) {
      s.members[i] = Member{true, static_cast<int64_t>(tokens.size())};
      any = true;
    } else if (first_error.ok()) {
      first_error = st;
    }
  }
  if (!any) {
    seqs_.erase(seq);
    return first_error.ok() ? absl::FailedPreconditionError("a proposer chain without members") : first_error;
  }
  return absl::OkStatus();
}

absl::StatusOr<Proposal> ProposerChain::Propose(const ProposeRequest& req, Deadline deadline) {
  auto it = seqs_.find(req.seq);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("sequence ", req.seq, " is not open on the chain"));
  Seq& s = it->second;
  if (req.base_len < 0 || req.base_len > static_cast<int64_t>(s.committed.size()))
    return absl::OutOfRangeError(absl::StrCat("sync base ", req.base_len, " outside the committed length ",
                                              s.committed.size()));
  s.committed.resize(static_cast<size_t>(req.base_len));
  s.committed.insert(s.committed.end(), req.new_tokens.begin(), req.new_tokens.end());
  const int64_t len = static_cast<int64_t>(s.committed.size());
  absl::Status last_error = absl::UnavailableError("no member of the proposer chain is available");
  std::optional<Proposal> empty;
  for (size_t i = 0; i < members_.size(); ++i) {
    Member& m = s.members[i];
    if (!m.open) {  // failed before (or never opened): reopen with the committed tokens
      if (absl::Status st = members_[i]->Open(req.seq, s.committed, s.sampling, deadline); !st.ok()) {
        last_error = st;
        continue;
      }
      m = Member{true, len};
    }
    ProposeRequest sub = req;
    sub.base_len = m.synced;
    sub.new_tokens.assign(s.committed.begin() + m.synced, s.committed.end());
    auto p = members_[i]->Propose(sub, deadline);
    if (!p.ok()) {
      m.open = false;
      last_error = p.status();
      continue;
    }
    m.synced = len;
    if (!p->tokens.empty()) {
      ++made_[i];
      return p;
    }
    if (!empty) empty = *std::move(p);
  }
  if (empty) return *std::move(empty);
  return last_error;
}

void ProposerChain::Release(int32_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  for (size_t i = 0; i < members_.size(); ++i) {
    if (i < it->second.members.size() && it->second.members[i].open) members_[i]->Release(seq);
  }
  seqs_.erase(it);
}

bool ProposerChain::OpensBesideTheTarget() const {
  return std::all_of(members_.begin(), members_.end(), [](const Proposer* m) { return m->OpensBesideTheTarget(); });
}

}  // namespace specd
