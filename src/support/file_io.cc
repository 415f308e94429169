#include "support/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "fmt/format.h"
#include "support/units.h"

namespace spillway {
namespace {

// The status for a system call that failed on `path` with `error` (an errno).
absl::Status SystemError(int error, std::string_view action, std::string_view what,
                         const std::string& path) {
  const std::string message =
      fmt::format("cannot {} {} '{}': {}", action, what, path, std::strerror(error));
  switch (error) {
    case ENOENT:
      return absl::NotFoundError(message);
    case ENOSPC:
    case EDQUOT:
    case EIO:
    case EROFS:
      return absl::DataLossError(message);
    default:
      return absl::InvalidArgumentError(message);
  }
}

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Closes now, reporting the error a delayed write may only show here.
  int Close() {
    const int result = ::close(fd_);
    fd_ = -1;
    return result;
  }

 private:
  int fd_;
};

std::string DirectoryOf(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

absl::Status WriteAll(int fd, std::string_view content, std::string_view what,
                      const std::string& path) {
  while (!content.empty()) {
    const ssize_t written = ::write(fd, content.data(), content.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      return SystemError(errno, "write", what, path);
    }
    content.remove_prefix(static_cast<size_t>(written));
  }
  return absl::OkStatus();
}

// Writes `content` to a new temporary file in `path`'s directory; its name.
absl::StatusOr<std::string> Stage(const std::string& path, std::string_view content,
                                  std::string_view what) {
  if (absl::Status writable = CheckOutputPath(path, what); !writable.ok()) return writable;
  std::string temporary = fmt::format("{}.tmp-XXXXXX", path);
  FileDescriptor fd(::mkstemp(temporary.data()));
  if (fd.get() < 0) return SystemError(errno, "write", what, path);
  absl::Status status = WriteAll(fd.get(), content, what, path);
  // mkstemp creates the file for its owner only; give it the usual mode.
  if (status.ok()) {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    if (::fchmod(fd.get(), 0666 & ~mask) != 0) status = SystemError(errno, "write", what, path);
  }
  // On the disk before the rename, so that a crash leaves the old file or
  // the new one, never an empty one under the new name.
  if (status.ok() && ::fsync(fd.get()) != 0) status = SystemError(errno, "write", what, path);
  if (status.ok() && fd.Close() != 0) status = SystemError(errno, "write", what, path);
  if (!status.ok()) {
    ::unlink(temporary.c_str());
    return status;
  }
  return temporary;
}

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path, int64_t max_bytes,
                                             std::string_view what) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return SystemError(errno, "open", what, path);
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) return SystemError(errno, "read", what, path);
  if (S_ISDIR(info.st_mode)) {
    return absl::InvalidArgumentError(
        fmt::format("{} '{}' is a directory, not a file", what, path));
  }
  // A device (/dev/zero, a disk) has no end worth reading to; a pipe may.
  if (S_ISCHR(info.st_mode) || S_ISBLK(info.st_mode)) {
    return absl::InvalidArgumentError(fmt::format("{} '{}' is a device, not a file", what, path));
  }
  const auto too_large = [&] {
    return absl::InvalidArgumentError(fmt::format("{} '{}' is larger than {}, the most a {} may be",
                                                  what, path, FormatBytes(max_bytes), what));
  };
  if (S_ISREG(info.st_mode) && info.st_size > max_bytes) return too_large();
  std::string content;
  if (S_ISREG(info.st_mode)) content.reserve(static_cast<size_t>(info.st_size));
  char buffer[1 << 16];
  while (true) {
    const ssize_t got = ::read(fd.get(), buffer, sizeof(buffer));
    if (got < 0) {
      if (errno == EINTR) continue;
      return SystemError(errno, "read", what, path);
    }
    if (got == 0) break;
    if (static_cast<int64_t>(content.size()) + got > max_bytes) return too_large();
    content.append(buffer, static_cast<size_t>(got));
  }
  return content;
}

absl::Status CheckOutputPath(const std::string& path, std::string_view what) {
  if (path.empty()) return absl::InvalidArgumentError(fmt::format("{}: the path is empty", what));
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
    return absl::InvalidArgumentError(
        fmt::format("cannot write {} '{}': it is a directory", what, path));
  }
  const std::string directory = DirectoryOf(path);
  if (::stat(directory.c_str(), &info) != 0) {
    return absl::InvalidArgumentError(fmt::format("cannot write {} '{}': directory '{}': {}", what,
                                                  path, directory, std::strerror(errno)));
  }
  if (!S_ISDIR(info.st_mode)) {
    return absl::InvalidArgumentError(
        fmt::format("cannot write {} '{}': '{}' is not a directory", what, path, directory));
  }
  if (::access(directory.c_str(), W_OK | X_OK) != 0) {
    return absl::InvalidArgumentError(fmt::format("cannot write {} '{}': directory '{}': {}", what,
                                                  path, directory, std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view content,
                                 std::string_view what) {
  OutputFiles files;
  if (absl::Status staged = files.Add(path, content, what); !staged.ok()) return staged;
  return files.Commit();
}

OutputFiles::~OutputFiles() {
  for (const Staged& file : staged_) ::unlink(file.temporary.c_str());
}

absl::Status OutputFiles::Add(const std::string& path, std::string_view content,
                              std::string_view what) {
  absl::StatusOr<std::string> temporary = Stage(path, content, what);
  if (!temporary.ok()) return temporary.status();
  staged_.push_back({*std::move(temporary), path, std::string(what)});
  return absl::OkStatus();
}

absl::Status OutputFiles::Commit() {
  // Every file is complete on disk before the first rename; a rename within
  // a directory fails only if the directory changed under us.
  for (size_t i = 0; i < staged_.size(); ++i) {
    if (::rename(staged_[i].temporary.c_str(), staged_[i].path.c_str()) != 0) {
      const int error = errno;
      staged_.erase(staged_.begin(), staged_.begin() + static_cast<std::ptrdiff_t>(i));
      return SystemError(error, "write", staged_.front().what, staged_.front().path);
    }
  }
  // A rename survives a crash once its directory is flushed too. Best effort:
  // the files are in place either way.
  for (const Staged& file : staged_) {
    const FileDescriptor directory(
        ::open(DirectoryOf(file.path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (directory.get() >= 0) ::fsync(directory.get());
  }
  staged_.clear();
  return absl::OkStatus();
}

}  // namespace spillway
