// --backend, --threads, --math-mode and --nondeterministic, shared by the
// commands that run kernels (train, forward, profile). Making the backend and saying which code
// paths it took are the session library's (session/training.h).
#pragma once

#include "CLI/CLI.hpp"
#include "session/training.h"

namespace spillway::cli {

// The flags fill the session library's description of a backend.
using BackendFlags = session::BackendSpec;

void AddBackendFlags(CLI::App& command, BackendFlags& flags);

}  // namespace spillway::cli
