// The systemd readiness protocol (sd_notify(3)) without libsystemd: when the
// service manager set $NOTIFY_SOCKET (Type=notify units), one datagram per
// state change. Outside systemd every call is a no-op.
#pragma once
#include <string>

#include "absl/status/status.h"

namespace specd {

// Sends `state` ("READY=1\nSTATUS=...", "STOPPING=1", ...) to $NOTIFY_SOCKET.
// OK (and nothing sent) when the variable is unset; an error when it is set
// but the message cannot be delivered (the caller logs it: systemd would then
// time the start out, and the log says why).
absl::Status SdNotify(const std::string& state);

}  // namespace specd
