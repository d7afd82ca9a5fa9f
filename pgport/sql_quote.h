// Copyright fencegate authors.
//
// SQL text the port writes itself: names and values quoted so that no
// client-chosen text can end them, whatever the session's
// standard_conforming_strings (values are dollar-quoted, with a tag the
// value does not contain).
//
// Thread safety: pure functions.

#ifndef PGPORT_SQL_QUOTE_H_
#define PGPORT_SQL_QUOTE_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace fencegate::pgport {

// "name", with '"' doubled.
std::string QuoteIdentifier(absl::string_view name);
// $fg$value$fg$, the tag lengthened until the value does not contain it.
// `value` must not contain NUL (the protocol cannot carry one).
std::string QuoteLiteral(absl::string_view value);

}  // namespace fencegate::pgport

#endif  // PGPORT_SQL_QUOTE_H_
