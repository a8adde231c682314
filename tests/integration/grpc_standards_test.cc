// The standard gRPC surfaces of the three processes, seen by gRPC's own
// Python clients (tests/python/grpc_check.py), as grpc_health_probe and
// grpcurl see them: server reflection lists and describes every service
// and its read-only calls answer; grpc.health.v1 answers on every process,
// and the coordinator's follows its workers' death and return.
#include "tests/integration/service_harness.h"

namespace specd::testing {
namespace {

class GrpcStandardsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SPECD_REQUIRE_PYREF("grpc_health.v1.health_pb2, grpc_reflection.v1alpha.proto_reflection_descriptor_database");
    ServiceOptions o;
    o.target_model = SharedTestModels().target;
    o.draft_model = SharedTestModels().draft;
    svc_ = std::make_unique<Service>(dir_.path(), o);
    const absl::Status st = svc_->Start();
    ASSERT_TRUE(st.ok()) << st << "\n" << svc_->Logs();
  }
  void TearDown() override {
    if (HasFailure() && svc_) std::cerr << svc_->Logs() << "\n";
  }
  // grpc_check.py's exit status; its output in `out`.
  int Check(const std::string& args, std::string* out) {
    return RunCommand(ShellQuote(PythonPath()) + " " + ShellQuote(SourcePath("tests/python/grpc_check.py")) + " " +
                          args + " 2>&1",
                      out);
  }
  void ExpectHealth(const std::string& address, const std::string& service, const std::string& status) {
    std::string out;
    EXPECT_EQ(Check("health " + address + " '" + service + "' " + status + " 60", &out), 0) << out;
  }

  TempDir dir_;
  std::unique_ptr<Service> svc_;
};

TEST_F(GrpcStandardsTest, ReflectionListsDescribesAndCallsEveryService) {
  struct Proc {
    std::string address, services;
  };
  const std::vector<Proc> procs = {{svc_->coordinator_address, "specd.v1.Coordinator,specd.v1.Admin"},
                                   {svc_->target_address, "specd.v1.TargetWorker"},
                                   {svc_->draft_address, "specd.v1.DraftWorker"}};
  for (const Proc& p : procs) {
    // grpc.health follows the workers on the server's tick: the coordinator
    // may still say NOT_SERVING for a tick after its own Health says ready.
    ExpectHealth(p.address, "", "SERVING");
    std::string out;
    EXPECT_EQ(Check("reflect " + p.address + " " + p.services, &out), 0) << out;
    EXPECT_NE(out.find("reflection ok"), std::string::npos) << out;
    EXPECT_NE(out.find("Check('') -> SERVING"), std::string::npos) << out;
  }
  // Each worker's service has only its own calls: none answers UNIMPLEMENTED.
  std::string out;
  Check("reflect " + svc_->target_address + " specd.v1.TargetWorker", &out);
  EXPECT_NE(out.find("specd.v1.TargetWorker: Info Open Sync Release Verify VerifyBatch AbandonVerify AttachDraft\n"), std::string::npos) << out;
  Check("reflect " + svc_->draft_address + " specd.v1.DraftWorker", &out);
  EXPECT_NE(out.find("specd.v1.DraftWorker: Info Open Sync Release Propose ProposeBatch LoadModel\n"), std::string::npos) << out;
}

TEST_F(GrpcStandardsTest, HealthFollowsTheWorkers) {
  ExpectHealth(svc_->target_address, "", "SERVING");
  ExpectHealth(svc_->target_address, "specd.v1.TargetWorker", "SERVING");
  ExpectHealth(svc_->draft_address, "specd.v1.DraftWorker", "SERVING");
  ExpectHealth(svc_->coordinator_address, "", "SERVING");
  ExpectHealth(svc_->coordinator_address, "specd.v1.Coordinator", "SERVING");
  ExpectHealth(svc_->coordinator_address, "specd.v1.DraftWorker", "SERVING");
  // The draft goes: the coordinator still serves (target-only), its draft does not.
  svc_->draft.Kill(SIGKILL);
  ExpectHealth(svc_->coordinator_address, "specd.v1.DraftWorker", "NOT_SERVING");
  ExpectHealth(svc_->coordinator_address, "", "SERVING");
  ASSERT_TRUE(svc_->StartDraft());
  ExpectHealth(svc_->coordinator_address, "specd.v1.DraftWorker", "SERVING");
  // The target goes: the coordinator does not serve until it is back.
  svc_->target.Kill(SIGKILL);
  ExpectHealth(svc_->coordinator_address, "", "NOT_SERVING");
  ExpectHealth(svc_->coordinator_address, "specd.v1.Coordinator", "NOT_SERVING");
  ASSERT_TRUE(svc_->StartTarget());
  ExpectHealth(svc_->coordinator_address, "", "SERVING");
  api::Request r;
  r.prompt = "Hello";
  r.max_tokens = 4;
  EXPECT_TRUE(svc_->client->Generate(r).ok());
}

}  // namespace
}  // namespace specd::testing
