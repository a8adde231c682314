// absl::Status <-> grpc::Status. Both use the canonical code numbering, so
// codes map one to one and messages pass through unchanged.
#pragma once
#include <grpcpp/grpcpp.h>

#include "common/util/status.h"

namespace specd::rpc {

grpc::Status ToGrpc(const absl::Status& s);
absl::Status FromGrpc(const grpc::Status& s);

}  // namespace specd::rpc
