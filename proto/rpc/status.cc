#include "proto/rpc/status.h"

namespace specd::rpc {

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

void ToCallStatus(const absl::Status& s, v1::CallStatus* out) {
  out->set_code(static_cast<int32_t>(s.code()));
  out->set_message(std::string(s.message()));
}

grpc::Status FromCallStatus(const v1::CallStatus& s) {
  if (s.code() == 0) return grpc::Status::OK;
  // A code this build does not know stays an error.
  const int code = s.code() > 0 && s.code() <= grpc::StatusCode::UNAUTHENTICATED ? s.code() : grpc::StatusCode::UNKNOWN;
  return grpc::Status(static_cast<grpc::StatusCode>(code), s.message());
}

}  // namespace specd::rpc
