#include "support/terminal.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <string>

namespace spillway {
namespace {

int ColumnsOf(int fd) {
  winsize size{};
  if (ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 0;
}

volatile sig_atomic_t interrupt_fd = STDERR_FILENO;

extern "C" void OnInterrupt(int signal_number) {
  const char newline = '\n';
  // Nothing to do if it fails: the process is about to die either way.
  [[maybe_unused]] const ssize_t written = write(interrupt_fd, &newline, 1);
  std::signal(signal_number, SIG_DFL);
  // Blocked while this handler runs; delivered, and fatal, when it returns.
  std::raise(signal_number);
}

}  // namespace

int TerminalColumns(int fd) {
  if (const int columns = ColumnsOf(fd); columns > 0) return columns;
  if (const int columns = ColumnsOf(STDERR_FILENO); columns > 0) return columns;
  if (const char* text = std::getenv("COLUMNS"); text != nullptr) {
    char* end = nullptr;
    const long columns = std::strtol(text, &end, 10);
    if (end != text && *end == '\0' && columns > 0 && columns < 100000) {
      return static_cast<int>(columns);
    }
  }
  return 80;
}

std::string FitLine(std::string_view line, int columns) {
  if (columns <= 0) return std::string(line);
  const size_t room = columns > 1 ? static_cast<size_t>(columns - 1) : 0;
  if (line.size() <= room) return std::string(line);
  constexpr std::string_view kEllipsis = "...";
  if (room <= kEllipsis.size()) return std::string(line.substr(0, room));
  return std::string(line.substr(0, room - kEllipsis.size())) + std::string(kEllipsis);
}

std::string FitFields(const std::vector<LineField>& fields, std::string_view separator,
                      int columns) {
  std::vector<bool> kept(fields.size(), true);
  const auto join = [&] {
    std::string line;
    for (size_t i = 0; i < fields.size(); ++i) {
      if (!kept[i]) continue;
      if (!line.empty()) line += separator;
      line += fields[i].text;
    }
    return line;
  };
  std::string line = join();
  if (columns <= 0) return line;
  const size_t room = columns > 1 ? static_cast<size_t>(columns - 1) : 0;
  while (line.size() > room) {
    // Leave out the least important field still shown (the last of equals),
    // unless it is the only one left.
    int drop = -1;
    int shown = 0;
    for (size_t i = 0; i < fields.size(); ++i) {
      if (!kept[i]) continue;
      ++shown;
      if (drop < 0 || fields[i].rank >= fields[static_cast<size_t>(drop)].rank) {
        drop = static_cast<int>(i);
      }
    }
    if (shown <= 1) break;
    kept[static_cast<size_t>(drop)] = false;
    line = join();
  }
  return FitLine(line, columns);
}

void EndLineOnInterrupt() {
  const bool err = isatty(STDERR_FILENO) != 0;
  const bool out = isatty(STDOUT_FILENO) != 0;
  if (!err && !out) return;
  struct sigaction current {};
  // A shell that started us in the background with SIGINT ignored: keep it so.
  if (sigaction(SIGINT, nullptr, &current) == 0 && current.sa_handler == SIG_IGN) return;
  interrupt_fd = err ? STDERR_FILENO : STDOUT_FILENO;
  struct sigaction action {};
  action.sa_handler = OnInterrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;
  sigaction(SIGINT, &action, nullptr);
}

}  // namespace spillway
