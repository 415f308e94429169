// What the file-reader fuzzers check (src/fuzz/*_fuzzer.cc), shared with the
// test that replays their corpora in every build (corpus_replay_test.cc).
//
// Each function takes arbitrary bytes as one of Spillway's input files and
// says whether the reader accepted them. A parse error is an expected
// outcome; these return an error only when the reader broke its contract: accepted bytes whose
// result is inconsistent (sizes that disagree with the shape, a value a validator refuses) or does
// not survive a round trip through the matching writer. Memory errors are
// for the sanitizers the fuzz preset builds with.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"

namespace spillway::fuzz {

absl::StatusOr<bool> CheckNpyBytes(std::string_view bytes);            // support/npy.h
absl::StatusOr<bool> CheckHardwareProfileText(std::string_view text);  // analysis/hardware.h
absl::StatusOr<bool> CheckCheckpointBytes(std::string_view bytes);     // train/checkpoint.h
absl::StatusOr<bool> CheckNodeLinkText(std::string_view text);         // nodelink/node_link.h

// A fuzz target's verdict on one input: 0 when the check held (the reader
// accepted or refused the bytes cleanly); otherwise prints the broken
// contract and aborts, which libFuzzer records as a finding.
int AbortIfBroken(const absl::StatusOr<bool>& checked);

}  // namespace spillway::fuzz
