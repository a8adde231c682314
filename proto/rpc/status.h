// absl::Status <-> grpc::Status <-> v1::CallStatus (one call's outcome in a
// batch message). Both use the canonical code numbering, so
// codes map one to one and messages pass through unchanged.
#pragma once
#include <grpcpp/grpcpp.h>

#include "common/util/status.h"
#include "proto/specd.pb.h"

namespace specd::rpc {

grpc::Status ToGrpc(const absl::Status& s);
absl::Status FromGrpc(const grpc::Status& s);
void ToCallStatus(const absl::Status& s, v1::CallStatus* out);
grpc::Status FromCallStatus(const v1::CallStatus& s);

}  // namespace specd::rpc
