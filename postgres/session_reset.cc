// Copyright fencegate authors.

#include "postgres/session_reset.h"

#include <openssl/rand.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fencegate::postgres {

std::string ReseedSql() {
  uint32_t bits = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&bits), sizeof(bits)) != 1) {
    // No seed to be had: setseed() refuses 2, the reset fails, and the
    // connection is closed rather than handed on.
    return "SELECT pg_catalog.setseed(2)";
  }
  const double seed = static_cast<double>(bits) / 4294967295.0 * 2.0 - 1.0;
  return absl::StrCat("SELECT pg_catalog.setseed(",
                      absl::StrFormat("%.17g", seed), ")");
}

}  // namespace fencegate::postgres
