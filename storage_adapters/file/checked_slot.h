// Copyright fencegate authors.
//
// Checked slots: the file adapter's small records that are overwritten in
// place rather than replaced by a rename, so that they are durable with the
// first sync of a write's group (file_commit.h) and cost no sync of their
// own. A slot is kCheckedSlotBytes long: "<magic>\n<line>\n<SHA-256 of the
// line in hex>", then NULs. A record keeps two slots and overwrites the one
// not holding its newest value: a crash that cuts a write short leaves that
// slot failing its checksum, and the other slot holding the value before.
// (A seq intent kept in a domain's own slot of a version file is the one
// exception: one slot, overwritten only while another copy stands,
// file_versions.h.) Used for a domain's seq intents (fence_records.h) and a
// path's version (file_versions.h).

#ifndef STORAGE_ADAPTERS_FILE_CHECKED_SLOT_H_
#define STORAGE_ADAPTERS_FILE_CHECKED_SLOT_H_

#include <cstddef>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace fencegate {

inline constexpr size_t kCheckedSlotBytes = 512;

// Hex SHA-256 of `text` (64 characters).
std::string Sha256Hex(absl::string_view text);

// A slot's bytes holding `line`, which has no '\n' and is short enough to
// fit with `magic` (a slot of a longer one would be cut short, and read as
// absent).
std::string CheckedSlotText(absl::string_view magic, absl::string_view line);

// The line of a slot's bytes (any trailing NULs, or none), if the slot is
// whole: its magic is `magic` and its checksum matches. nullopt for a slot
// never written or cut short.
std::optional<std::string> ParseCheckedSlot(absl::string_view text,
                                            absl::string_view magic);

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_FILE_CHECKED_SLOT_H_
