#include "train/progress.h"

#include <cmath>
#include <vector>

#include "fmt/format.h"
#include "fmt/ostream.h"
#include "support/terminal.h"
#include "support/units.h"

namespace spillway::train {
namespace {

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto whole = static_cast<int64_t>(std::lround(seconds));
  if (whole < 60) return fmt::format("{}s", whole);
  if (whole < 3600) return fmt::format("{}m{:02}s", whole / 60, whole % 60);
  return fmt::format("{}h{:02}m", whole / 3600, whole / 60 % 60);
}

}  // namespace

Progress::Progress(std::ostream& out, Mode mode, int64_t log_every, std::string sample_unit,
                   int columns)
    : out_(out),
      mode_(mode),
      log_every_(log_every < 1 ? 1 : log_every),
      sample_unit_(std::move(sample_unit)),
      columns_(mode == Mode::kTerminal ? columns : 0) {}

std::string Progress::Line(const StepReport& report) const {
  const double rate = seconds_ > 0 ? static_cast<double>(samples_) / seconds_ : 0;
  const double eta = static_cast<double>(report.last_step - report.step) * seconds_ /
                     static_cast<double>(steps_seen_);
  double mean_loss = 0;
  for (double loss : recent_losses_) mean_loss += loss;
  mean_loss /= static_cast<double>(recent_losses_.size());
  // Rank: which fields stay on a narrow terminal (0 longest).
  const std::vector<LineField> fields = {
      {fmt::format("step {}/{}", report.step, report.last_step), 0},
      {fmt::format("loss {:.4f} (mean {:.4f})", report.loss, mean_loss), 1},
      {fmt::format("{:.1f} {}/s", rate, sample_unit_), 3},
      {fmt::format("arena {}", FormatBytes(report.arena_high_water)), 4},
      {fmt::format("spilled {}/step", FormatBytes(report.bytes_to_host)), 5},
      {fmt::format("recompute {:.2f}s", recompute_seconds_), 6},
      {fmt::format("eta {}", FormatDuration(eta)), 2},
  };
  return FitFields(fields, "  ", columns_);
}

void Progress::Update(const StepReport& report) {
  ++steps_seen_;
  seconds_ += report.seconds;
  samples_ += report.samples;
  recompute_seconds_ += report.recompute_seconds;
  recent_losses_.push_back(report.loss);
  if (static_cast<int64_t>(recent_losses_.size()) > log_every_) recent_losses_.pop_front();
  if (mode_ == Mode::kTerminal) {
    // \r returns to the start of the line, ESC[K clears what a longer
    // previous line left.
    fmt::print(out_, "\r{}\x1b[K", Line(report));
    out_.flush();
    line_open_ = true;
    return;
  }
  if (steps_seen_ % log_every_ == 0 || report.step == report.last_step || steps_seen_ == 1) {
    fmt::print(out_, "{}\n", Line(report));
    out_.flush();
  }
}

void Progress::Finish() {
  if (line_open_) {
    out_ << "\n";
    out_.flush();
    line_open_ = false;
  }
}

}  // namespace spillway::train
