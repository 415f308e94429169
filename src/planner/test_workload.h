// A training graph written in the text format, with everything a
// PlanningContext needs, for the planner's tests.
#pragma once

#include <cstdint>
#include <string_view>

#include "analysis/cost_model.h"
#include "analysis/hardware.h"
#include "ir/graph.h"
#include "planner/planner.h"
#include "program/test_graphs.h"

namespace spillway::planner::testing {

struct TestWorkload {
  TestWorkload(std::string_view text, std::string_view hardware, int64_t budget_bytes)
      : graph(program::testing::ParseOrDie(text)),
        profile(*analysis::LoadHardwareProfile(hardware)),
        cost_model(profile),
        context(graph, cost_model, profile, {.budget_bytes = budget_bytes}) {}
  ir::ValueId Value(std::string_view name) const { return *graph.FindValue(name); }
  ir::NodeId Node(std::string_view name) const { return *graph.FindNode(name); }

  ir::Graph graph;
  analysis::HardwareProfile profile;
  analysis::RooflineCostModel cost_model;
  PlanningContext context;
};

}  // namespace spillway::planner::testing
