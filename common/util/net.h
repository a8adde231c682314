// Small socket helpers.
#pragma once

namespace specd {

// A loopback TCP port nobody listens on right now (0 if none was found). The
// port is only free until someone binds it: callers retry on a bind failure.
int FreeLoopbackPort();

}  // namespace specd
