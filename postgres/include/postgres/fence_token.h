// Copyright fencegate authors.
//
// A token as PostgreSQL's fence column holds it: the bound every door
// checks before anything moves (the gRPC route's Writes and Fence calls,
// the port's fencegate.token), and the database's token read back from a
// stale refusal (SQLSTATE FG001, fence_schema.h), which both the route's
// pipeline and its fence-table calls decode.
//
// Thread safety: pure functions.

#ifndef POSTGRES_FENCE_TOKEN_H_
#define POSTGRES_FENCE_TOKEN_H_

#include <cstdint>
#include <limits>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace fencegate::postgres {

// The highest token the fence column (bigint) holds: 2^63-1.
inline constexpr uint64_t kMaxFenceToken =
    static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

// OK if `token` fits the fence column; else INVALID_ARGUMENT naming `what`
// ("token", "fencegate.token") and the bound.
absl::Status CheckFenceToken(uint64_t token, absl::string_view what);

// The database's token of a stale refusal: for SQLSTATE FG001, its DETAIL
// read as a token; nullopt for another SQLSTATE, or a DETAIL (null: none)
// that is not a token.
std::optional<uint64_t> StaleHeldToken(absl::string_view sqlstate,
                                       const char* detail);

}  // namespace fencegate::postgres

#endif  // POSTGRES_FENCE_TOKEN_H_
