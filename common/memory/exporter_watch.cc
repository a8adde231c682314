#include "common/memory/exporter_watch.h"

#include "common/util/log.h"

namespace specd {

ExporterWatch::ExporterWatch(std::unique_ptr<DeviceRegistry> registry, Callbacks cb, std::chrono::milliseconds poll)
    : registry_(std::move(registry)), cb_(std::move(cb)), poll_(poll) {
  thread_ = std::thread([this] { Loop(); });
}

ExporterWatch::~ExporterWatch() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

const char* ExporterWatch::StateName(State s) {
  switch (s) {
    case State::kIdle: return "idle";
    case State::kFollowing: return "following";
    case State::kWaiting: return "waiting";
  }
  return "?";
}

void ExporterWatch::Follow(const ProcessId& p) {
  std::lock_guard<std::mutex> l(mu_);
  following_ = p;
  state_ = p.pid > 0 ? State::kFollowing : State::kIdle;
  last_failed_ = ProcessId();
  ++follows_;
  cv_.notify_all();
}

ExporterWatch::State ExporterWatch::state() const {
  std::lock_guard<std::mutex> l(mu_);
  return state_;
}

void ExporterWatch::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    cv_.wait_for(l, poll_, [&] { return stop_; });
    if (stop_) return;
    l.unlock();
    Step();
    l.lock();
  }
}

void ExporterWatch::Step() {
  State state;
  ProcessId following, last_failed;
  uint64_t follows;
  {
    std::lock_guard<std::mutex> l(mu_);
    state = state_;
    following = following_;
    last_failed = last_failed_;
    follows = follows_;
  }
  if (state == State::kFollowing) {
    if (ProcessAlive(following)) return;
    SPECD_LOG(WARN) << "the process whose weights this draft maps has exited; unloading the draft model (requests "
                       "run target-only) until a target is ready on this device again"
                    << Kv("exporter_pid", following.pid);
    cb_.drop(following);
    std::lock_guard<std::mutex> l(mu_);
    if (follows_ == follows) state_ = State::kWaiting;
    return;
  }
  if (state != State::kWaiting) return;
  auto live = registry_->List();
  if (!live.ok()) {
    SPECD_LOG(WARN) << "cannot read the device registry" << Kv("error", live.status().message());
    return;
  }
  // Any ready target but the one that refused the last reload (that one may
  // still be listed, exiting, next to its successor).
  const RegistryEntry* target = nullptr;
  for (const RegistryEntry& e : *live) {
    if (e.role == "target" && e.state == "ready" && e.proc != last_failed) target = &e;
  }
  if (!target) return;
  SPECD_LOG(INFO) << "a target is ready on this device; loading the draft model again" << Kv("target", target->Describe());
  const ProcessId tried = target->proc;
  auto r = cb_.reload();
  std::lock_guard<std::mutex> l(mu_);
  if (follows_ != follows) return;  // a swap loaded a model meanwhile: it decides
  if (!r.ok()) {
    SPECD_LOG(ERROR) << "the draft model could not be loaded again; it stays unloaded until another target process "
                        "is ready on this device (or a swap-draft)"
                     << Kv("error", r.status().message());
    last_failed_ = tried;
    return;
  }
  following_ = *r;
  state_ = r->pid > 0 ? State::kFollowing : State::kIdle;
  ++follows_;
}

}  // namespace specd
