// Copyright fencegate authors.
//
// fencectl's exit codes, part of its interface for shell scripts
// (`fencectl --help` prints them), and its usage error.

#ifndef TOOLS_FENCECTL_EXIT_CODES_H_
#define TOOLS_FENCECTL_EXIT_CODES_H_

#include <iostream>
#include <string>

namespace fencegate::fencectl {

inline constexpr int kExitOk = 0;
// Any other error.
inline constexpr int kExitError = 1;
// Bad command line: an unknown flag, a missing or malformed value.
inline constexpr int kExitUsage = 2;
// The token is stale: the domain's fence is higher.
inline constexpr int kExitStale = 3;
// The request was refused as invalid (INVALID_ARGUMENT,
// FAILED_PRECONDITION, OUT_OF_RANGE), or `health` asked for an unknown
// route.
inline constexpr int kExitInvalid = 4;
// The gateway or its storage is unavailable, or the deadline passed.
inline constexpr int kExitUnavailable = 5;
// `lock`: the lock was not acquired in time, or was lost.
inline constexpr int kExitLock = 6;
// Permission denied, or not authenticated.
inline constexpr int kExitDenied = 7;
// The token was refused: no lock service granted it.
inline constexpr int kExitTokenRefused = 8;
// `health`: the gateway or the route answers NOT_SERVING.
inline constexpr int kExitNotServing = 9;
// `write --seq`: a later seq of the token was applied before this one
// (SeqOutOfOrder); nothing was applied.
inline constexpr int kExitSeqOutOfOrder = 10;
// `write --if-absent / --if-version`: the file's state did not meet the
// precondition (PreconditionFailed); that operation changed nothing.
inline constexpr int kExitPreconditionFailed = 11;

// Prints "fencectl: MESSAGE (see fencectl --help)"; returns kExitUsage.
inline int UsageError(const std::string& message) {
  std::cerr << "fencectl: " << message << " (see fencectl --help)\n";
  return kExitUsage;
}

}  // namespace fencegate::fencectl

#endif  // TOOLS_FENCECTL_EXIT_CODES_H_
