// Error handling: absl::Status / absl::StatusOr everywhere, plus two macros.
#pragma once
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#define SPECD_CONCAT_INNER_(a, b) a##b
#define SPECD_CONCAT_(a, b) SPECD_CONCAT_INNER_(a, b)

#define SPECD_RETURN_IF_ERROR(expr)              \
  do {                                           \
    ::absl::Status specd_status_ = (expr);       \
    if (!specd_status_.ok()) return specd_status_; \
  } while (0)

#define SPECD_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

#define SPECD_ASSIGN_OR_RETURN(lhs, expr) \
  SPECD_ASSIGN_OR_RETURN_IMPL_(SPECD_CONCAT_(specd_statusor_, __LINE__), lhs, expr)
