// Progress of a training run, as it goes. On a terminal: one line redrawn in
// place after every step. Otherwise (a file, a pipe, a CI log): a plain line
// at the first step, every `log_every` steps and at the last. Each line shows
// the step's loss and, since one batch's loss is noisy, its mean over the
// last `log_every` steps.
#pragma once

#include <cstdint>
#include <deque>
#include <ostream>
#include <string>

namespace spillway::train {

// One step as the trainer saw it.
struct StepReport {
  int64_t step = 0;       // 1-based, counting steps of earlier runs resumed from
  int64_t last_step = 0;  // the step the run ends at
  double loss = 0;
  double seconds = 0;
  double recompute_seconds = 0;
  int64_t samples = 0;  // images or sequences in the batch
  int64_t arena_high_water = 0;
  int64_t bytes_to_host = 0;
};

class Progress {
 public:
  enum class Mode { kTerminal, kPlain };

  // `sample_unit` names a sample in the rate: "img" or "seq". In terminal
  // mode the line fits in `columns` (TerminalColumns() of the output; 0: no
  // limit), leaving out the fields that matter least (recompute, spilled,
  // arena, rate, eta, in that order) rather than wrapping.
  Progress(std::ostream& out, Mode mode, int64_t log_every, std::string sample_unit,
           int columns = 0);
  // Finishes the line, so that an error reported after a failed step starts
  // on a line of its own.
  ~Progress() { Finish(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void Update(const StepReport& report);
  // Ends the redrawn line on a terminal.
  void Finish();

 private:
  std::string Line(const StepReport& report) const;

  std::ostream& out_;
  Mode mode_;
  int64_t log_every_;
  std::string sample_unit_;
  int columns_;
  int64_t steps_seen_ = 0;
  double seconds_ = 0;
  int64_t samples_ = 0;
  double recompute_seconds_ = 0;
  std::deque<double> recent_losses_;  // the last log_every_
  bool line_open_ = false;
};

}  // namespace spillway::train
