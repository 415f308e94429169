// Lines redrawn in place on a terminal (training and planning progress): how
// wide the terminal is, fitting a line to it, and ending the line when the
// user interrupts.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace spillway {

// Columns of the terminal on `fd`, else on stderr (TIOCGWINSZ), else $COLUMNS,
// else 80.
int TerminalColumns(int fd);

// A part of a status line and how much it matters: rank 0 is kept longest.
struct LineField {
  std::string text;
  int rank = 0;
};

// The fields, in their order, joined by `separator`, in at most `columns` - 1
// characters (a terminal wraps a line that fills its last column, and a
// wrapped line is not redrawn in place): the fields of the highest rank are
// left out first; if the most important field alone is too wide it is cut and
// ends in "...". columns <= 0: no limit.
std::string FitFields(const std::vector<LineField>& fields, std::string_view separator,
                      int columns);

// `line` in at most `columns` - 1 characters, cut with "..." when longer.
std::string FitLine(std::string_view line, int columns);

// On SIGINT (Ctrl-C) write a newline to the terminal (stderr, or stdout if
// only it is one), so that the shell's prompt does not land on a progress
// line, then die of SIGINT as by default (exit status 130 in a shell). Does
// nothing when neither is a terminal. Async-signal-safe.
void EndLineOnInterrupt();

}  // namespace spillway
