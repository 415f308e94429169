// One line on stderr, redrawn in place while the planner works, when
// someone is watching (stderr is a terminal); nothing otherwise. `plan` and
// `compare` use it through a session::PlanningObserver, `train` through
// PlannerOptions::progress.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <utility>

#include "fmt/format.h"
#include "support/terminal.h"

namespace spillway::cli {

class PlanningProgress {
 public:
  PlanningProgress() : shown_(isatty(fileno(stderr)) != 0) {
    // Ctrl-C while planning leaves the line with a newline.
    if (shown_) EndLineOnInterrupt();
  }
  ~PlanningProgress() { Clear(); }
  PlanningProgress(const PlanningProgress&) = delete;
  PlanningProgress& operator=(const PlanningProgress&) = delete;

  // The policy now planning.
  void Begin(std::string label) {
    label_ = std::move(label);
    begin_ = std::chrono::steady_clock::now();
    Draw(0, /*force=*/true);
  }
  // Candidate plans considered since Begin: redraws at most five times a second.
  void Draw(int candidates, bool force = false) {
    if (!shown_) return;
    const auto now = std::chrono::steady_clock::now();
    if (!force && now - drawn_ < std::chrono::milliseconds(200)) return;
    drawn_ = now;
    const double seconds = std::chrono::duration<double>(now - begin_).count();
    // Cut to the terminal's width: a wrapped line is not redrawn in place.
    fmt::print(stderr, "\r\033[K{}",
               FitLine(fmt::format("planning {}: {} candidate plans, {:.1f} s", label_, candidates,
                                   seconds),
                       TerminalColumns(fileno(stderr))));
    std::fflush(stderr);
    line_open_ = true;
  }
  // Erases the line, if one is drawn.
  void Clear() {
    if (!line_open_) return;
    fmt::print(stderr, "\r\033[K");
    std::fflush(stderr);
    line_open_ = false;
  }

 private:
  bool shown_;
  bool line_open_ = false;
  std::string label_;
  std::chrono::steady_clock::time_point begin_;
  std::chrono::steady_clock::time_point drawn_;
};

}  // namespace spillway::cli
