// Whole-file reads and writes with the guarantees every file Spillway reads
// or writes has:
//  - a read refuses a directory, a device (/dev/zero), and a file larger
//    than a declared maximum before reading it (a pipe is read up to the
//    maximum and refused past it), so no input can exhaust memory;
//  - a write goes to a temporary file beside the target, is flushed to the
//    disk (fsync) and renamed over it, and the directory is flushed, so a
//    failure or a crash never leaves a partial file and never destroys the
//    file that was there;
//  - errors name the file, what it is for and the system's reason. Bad paths
//    (missing, a directory, no permission) are InvalidArgument or NotFound;
//    a failing disk (full, I/O error) is DataLoss, which the command line
//    reports as a failure of the machine rather than of the input.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace spillway {

// The whole of `path`, at most `max_bytes` of it. `what` names the file in
// errors ("ONNX file", "checkpoint").
absl::StatusOr<std::string> ReadFileToString(const std::string& path, int64_t max_bytes,
                                             std::string_view what);

// Checks, before long work starts, that `path` can be written: it is not a
// directory, and its directory exists and is writable.
absl::Status CheckOutputPath(const std::string& path, std::string_view what);

// Writes `content` to `path` through a temporary file and a rename.
absl::Status WriteFileAtomically(const std::string& path, std::string_view content,
                                 std::string_view what);

// Files that appear together or not at all: Add() stages each one in a
// temporary file beside its target, Commit() renames them all into place.
// Files not committed (an error, or destruction before Commit) are removed.
class OutputFiles {
 public:
  OutputFiles() = default;
  OutputFiles(const OutputFiles&) = delete;
  OutputFiles& operator=(const OutputFiles&) = delete;
  ~OutputFiles();

  absl::Status Add(const std::string& path, std::string_view content, std::string_view what);
  absl::Status Commit();

 private:
  struct Staged {
    std::string temporary;
    std::string path;
    std::string what;
  };
  std::vector<Staged> staged_;
};

}  // namespace spillway
