// Plans a built-in model's training step through an installed Spillway, with
// the session library: a workload, a hardware preset and two policies.
#include <cstdio>
#include <memory>

#include "session/planning.h"

int main() {
  using namespace spillway;
  session::PlanningRequest request;
  request.workload.model = "resnet18";
  request.workload.image = 64;
  request.workload.batch = 2;
  request.hardware = "v100-16g-nvlink2";
  absl::StatusOr<std::unique_ptr<session::PlanningSession>> session =
      session::PlanningSession::Create(request);
  if (!session.ok()) {
    std::fprintf(stderr, "%s\n", std::string(session.status().message()).c_str());
    return 1;
  }
  for (const char* name : {"none", "hybrid"}) {
    absl::StatusOr<planner::PlanResult> result = (*session)->Run(name);
    if (!result.ok() || !result->feasible) return 1;
    std::printf("%s: step %.6f s, arena %lld bytes\n", name, result->best.step_time_s(),
                static_cast<long long>(result->best.arena_bytes()));
  }
  return 0;
}
