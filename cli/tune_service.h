// Starting and stopping the three specd processes for `specd tune`: loopback
// free ports, one log file per process, bounded waits, and every child
// stopped when its owner goes (SIGTERM, then SIGKILL; children also get
// SIGKILL if specd itself dies).
//
// A process's settings are kept as (key, value) pairs: the same pairs become
// its command-line flags in a trial and the lines of the config file tune
// writes, so the files describe exactly what was measured.
#pragma once
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/util/status.h"
#include "common/util/subprocess.h"

namespace specd::client {
class Client;
}

namespace specd::tune {

using KeyValues = std::vector<std::pair<std::string, std::string>>;

// `name` (e.g. "specd-coordinator") in `bin_dir` when given; else next to
// this executable, in its build-tree sibling folders, then on $PATH.
absl::StatusOr<std::string> FindBinary(const std::string& name, const std::string& bin_dir);

// The option names a specd binary accepts (from its --help=json), so that
// tune uses only what the installed services know (e.g. --adaptive).
absl::StatusOr<std::set<std::string>> OptionsOf(const std::string& binary);

// "--key value" for each pair.
std::vector<std::string> ToFlags(const KeyValues& kv);
// "key = value" lines under a comment header.
std::string ToConfigFile(const KeyValues& kv, const std::string& header);
// The value of `key` (last one wins, as in a config file), or "".
std::string Lookup(const KeyValues& kv, const std::string& key);
// Replaces or appends.
void SetKey(KeyValues* kv, const std::string& key, const std::string& value);

enum class StartOutcome { kOk, kDoesNotFit, kFailed };

struct StartResult {
  StartOutcome outcome = StartOutcome::kFailed;
  std::string message;  // why it did not start (first lines of the error)
};

// The three processes of one service. Workers and coordinator start and stop
// separately: a trial that changes only coordinator settings keeps the workers.
class Service {
 public:
  struct Binaries {
    std::string target, draft, coordinator;
  };
  Service(Binaries bins, std::string log_dir, std::string log_prefix);
  ~Service();

  // Starts the workers on free loopback ports with `target` / `draft` keys
  // (listen is added; an empty `draft` means a target-only service) and waits
  // until both answer. "does not fit" when a worker refuses its memory plan.
  StartResult StartWorkers(const KeyValues& target, const KeyValues& draft, std::chrono::seconds timeout);
  // Starts the coordinator (listen/target/draft added) and waits until it
  // serves (with the draft ready when there is one).
  StartResult StartCoordinator(const KeyValues& coordinator, std::chrono::seconds timeout);
  void StopCoordinator();
  void StopAll();

  // Starts the three from config files (flags add only the addresses) —
  // checks that the files tune writes are accepted as they are.
  StartResult StartFromConfigFiles(const std::string& target_conf, const std::string& draft_conf,
                                   const std::string& coordinator_conf, std::chrono::seconds timeout);

  const std::string& coordinator_address() const { return coordinator_address_; }
  client::Client* client() { return client_.get(); }

 private:
  StartResult StartWorkersArgs(const std::vector<std::string>& target, const std::vector<std::string>& draft,
                               std::chrono::seconds timeout);
  StartResult StartCoordinatorArgs(const std::vector<std::string>& args, std::chrono::seconds timeout);
  StartResult Failure(Subprocess& p, const std::string& what);
  std::string Log(const std::string& what) const;

  Binaries bins_;
  std::string log_dir_, log_prefix_;
  std::string target_address_, draft_address_, coordinator_address_;
  bool have_draft_ = false;
  Subprocess target_, draft_, coordinator_;
  std::unique_ptr<client::Client> client_;
};

}  // namespace specd::tune
