// Copyright fencegate authors.

#include "storage_adapters/file/checked_slot.h"

#include <openssl/evp.h>

#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace fencegate {

std::string Sha256Hex(absl::string_view text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(text.data(), text.size(), digest, &size, EVP_sha256(), nullptr);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), size));
}

std::string CheckedSlotText(absl::string_view magic, absl::string_view line) {
  std::string text = absl::StrCat(magic, "\n", line, "\n", Sha256Hex(line));
  text.resize(kCheckedSlotBytes, '\0');
  return text;
}

std::optional<std::string> ParseCheckedSlot(absl::string_view text,
                                            absl::string_view magic) {
  text = text.substr(0, text.find('\0'));
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  if (lines.size() != 3 || lines[0] != magic ||
      lines[2] != Sha256Hex(lines[1])) {
    return std::nullopt;
  }
  return std::string(lines[1]);
}

}  // namespace fencegate
