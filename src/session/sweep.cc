#include "session/sweep.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <system_error>
#include <utility>

#include "fmt/format.h"
#include "planner/policies.h"
#include "sim/sweep_plot.h"
#include "support/status_macros.h"
#include "support/units.h"

namespace spillway::session {

absl::StatusOr<std::vector<int64_t>> SpacedBudgets(int64_t arena_bytes, double from, double to,
                                                   int points) {
  if (!(from > 0) || !(to <= 1) || !(from <= to)) {
    return absl::InvalidArgumentError(fmt::format(
        "the sweep's shares must satisfy 0 < from <= to <= 1, not from {:g} to {:g}", from, to));
  }
  if (points < 1 || (points == 1 && from != to)) {
    return absl::InvalidArgumentError(
        fmt::format("a sweep from {:g} to {:g} needs at least 2 points, not {}", from, to, points));
  }
  std::vector<int64_t> budgets;
  for (int i = 0; i < points; ++i) {
    const double share = points == 1 ? from : from + (to - from) * i / (points - 1);
    budgets.push_back(
        std::max<int64_t>(1, static_cast<int64_t>(share * static_cast<double>(arena_bytes))));
  }
  // Shares closer than a byte apart on a small arena.
  budgets.erase(std::unique(budgets.begin(), budgets.end()), budgets.end());
  return budgets;
}

namespace {

// "30%" as 0.3: a share above 0% and at most 100%.
absl::StatusOr<double> ParseShare(std::string_view flag, std::string_view text) {
  double percent = 0;
  if (text.ends_with('%')) {
    const std::string_view number = text.substr(0, text.size() - 1);
    const auto [end, error] =
        std::from_chars(number.data(), number.data() + number.size(), percent);
    if (error == std::errc() && end == number.data() + number.size() && percent > 0 &&
        percent <= 100) {
      return percent / 100;
    }
  }
  return absl::InvalidArgumentError(fmt::format(
      "{} '{}': a share of the arena none needs, above 0% and at most 100% (30%)", flag, text));
}

// The point's plan, replaced by `below`'s plan as it was laid out at its
// budget: it fits this larger budget as it is. The counts and times stay
// this budget's, which is what its planning did.
void Carry(const SweepPoint& below, SweepPoint& point) {
  planner::PlanResult& result = point.result;
  result.best = below.result.best;
  result.feasible = true;
  result.start = below.result.start;
  result.backward_order = below.result.backward_order;
  point.carried_from_bytes =
      below.carried_from_bytes >= 0 ? below.carried_from_bytes : below.budget_bytes;
}

}  // namespace

namespace {

// The shares of a sweep without sizes, checked: (from, to).
absl::StatusOr<std::pair<double, double>> Shares(const SweepBudgets& budgets) {
  ASSIGN_OR_RETURN(const double from, ParseShare("--from", budgets.from));
  ASSIGN_OR_RETURN(const double to, ParseShare("--to", budgets.to));
  if (from > to) {
    return absl::InvalidArgumentError(
        fmt::format("--from {} is above --to {}", budgets.from, budgets.to));
  }
  if (budgets.points < 1 || budgets.points > 1000) {
    return absl::InvalidArgumentError(
        fmt::format("--points must be an integer from 1 to 1000, got '{}'", budgets.points));
  }
  if (budgets.points == 1 && from != to) {
    return absl::InvalidArgumentError(
        "--points 1 needs --from and --to equal; give 2 or more points");
  }
  return std::pair(from, to);
}

}  // namespace

absl::Status CheckSweepBudgets(const SweepBudgets& budgets) {
  if (!budgets.sizes.empty()) return absl::OkStatus();
  return Shares(budgets).status();
}

absl::StatusOr<std::vector<int64_t>> ResolveBudgets(PlanningSession& session,
                                                    const SweepBudgets& budgets) {
  std::vector<int64_t> bytes;
  if (budgets.sizes.empty()) {
    ASSIGN_OR_RETURN(const auto shares, Shares(budgets));
    ASSIGN_OR_RETURN(const planner::PlanResult none, session.Run("none"));
    return SpacedBudgets(none.best.arena_bytes(), shares.first, shares.second, budgets.points);
  }
  for (const std::string& text : budgets.sizes) {
    absl::StatusOr<int64_t> budget = planner::ParseBudget(text, session.profile());
    if (!budget.ok()) {
      return absl::InvalidArgumentError(
          fmt::format("--budgets '{}': {}", text, StatusMessage(budget.status())));
    }
    bytes.push_back(*budget);
  }
  return bytes;
}

absl::StatusOr<Sweep> RunSweep(PlanningSession& session, std::string_view policy,
                               std::vector<int64_t> budgets) {
  if (budgets.empty()) return absl::InvalidArgumentError("a sweep needs at least one budget");
  std::sort(budgets.begin(), budgets.end());
  if (budgets.front() < 1) {
    return absl::InvalidArgumentError(
        fmt::format("a budget must be at least 1 byte, not {}", budgets.front()));
  }
  if (const auto twice = std::adjacent_find(budgets.begin(), budgets.end());
      twice != budgets.end()) {
    return absl::InvalidArgumentError(
        fmt::format("the sweep has the budget {} twice", FormatBytes(*twice)));
  }
  // Refuses an unknown policy before any planning.
  ASSIGN_OR_RETURN(const std::unique_ptr<planner::Policy> unused, planner::MakePolicy(policy));
  const bool hybrid = policy == "hybrid";
  Sweep sweep;
  sweep.policy = std::string(policy);
  const int64_t budget_before = session.budget_bytes();
  ASSIGN_OR_RETURN(sweep.none, session.Run("none"));
  for (size_t i = 0; i < budgets.size(); ++i) {
    RETURN_IF_ERROR(session.SetBudget(budgets[i]));
    const std::string label =
        fmt::format("{} at {} ({}/{})", policy, FormatBytes(budgets[i]), i + 1, budgets.size());
    SweepPoint point;
    point.budget_bytes = budgets[i];
    const SweepPoint* below = sweep.points.empty() ? nullptr : &sweep.points.back();
    const bool seeded = hybrid && below != nullptr && below->result.feasible;
    if (hybrid) {
      std::vector<planner::HybridPolicy::Seed> seeds;
      if (seeded) {
        const int64_t made_at =
            below->carried_from_bytes >= 0 ? below->carried_from_bytes : below->budget_bytes;
        seeds.push_back({fmt::format("the plan at {}", FormatBytes(made_at)), below->result.best});
      }
      planner::HybridPolicy planning({}, std::move(seeds));
      ASSIGN_OR_RETURN(point.result, session.Run(planning, label));
    } else {
      ASSIGN_OR_RETURN(point.result, session.Run(policy, label));
    }
    // The seed was refined laid out afresh for this budget; as laid out
    // below, it may still be the faster (a tie keeps this budget's own plan).
    if (seeded && planner::Better(below->result.best, point.result.best, budgets[i])) {
      Carry(*below, point);
    }
    sweep.points.push_back(std::move(point));
  }
  RETURN_IF_ERROR(session.SetBudget(budget_before));
  return sweep;
}

nlohmann::json SweepToJson(const PlanningSession& session, const Sweep& sweep) {
  const int64_t none_arena = sweep.none.best.arena_bytes();
  nlohmann::json points = nlohmann::json::array();
  for (const SweepPoint& point : sweep.points) {
    nlohmann::json entry = PlanResultToJson(point.result, sweep.none, nullptr, point.budget_bytes);
    entry["share_of_none_arena"] =
        static_cast<double>(point.budget_bytes) / static_cast<double>(none_arena);
    if (point.carried_from_bytes >= 0) entry["carried_from_bytes"] = point.carried_from_bytes;
    points.push_back(std::move(entry));
  }
  return {{"workload", session.Describe(/*with_budget=*/false)},
          {"policy", sweep.policy},
          {"none_arena_bytes", none_arena},
          {"none_step_time_s", sweep.none.best.step_time_s()},
          {"points", std::move(points)}};
}

std::string SweepPlot(const PlanningSession& session, std::span<const Sweep* const> sweeps) {
  std::vector<sim::SweepPlotSeries> series;
  int64_t none_arena = 0;
  for (const Sweep* each : sweeps) {
    const Sweep& sweep = *each;
    sim::SweepPlotSeries& one = series.emplace_back();
    one.name = sweep.policy;
    const double none_s = sweep.none.best.step_time_s();
    none_arena = sweep.none.best.arena_bytes();
    for (const SweepPoint& point : sweep.points) {
      one.points.push_back({.budget_bytes = point.budget_bytes,
                            .feasible = point.result.feasible,
                            .overhead = point.result.best.step_time_s() / none_s - 1.0,
                            .carried = point.carried_from_bytes >= 0});
    }
  }
  const std::string workload = session.Describe(/*with_budget=*/false);
  return sim::SweepPlotSvg(
      std::move(series), none_arena,
      sweeps.size() == 1 ? fmt::format("{}: {}", sweeps[0]->policy, workload) : workload);
}

}  // namespace spillway::session
