// Copyright fencegate authors.

#include "observability/trace_context.h"

#include "absl/strings/ascii.h"

namespace fencegate {
namespace {

bool LowerHex(absl::string_view s) {
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c)) &&
        (c < 'a' || c > 'f')) {
      return false;
    }
  }
  return true;
}

bool AllZero(absl::string_view s) {
  return s.find_first_not_of('0') == absl::string_view::npos;
}

}  // namespace

std::string TraceIdOf(absl::string_view traceparent) {
  // version "-" trace-id "-" parent-id "-" flags: 2+1+32+1+16+1+2 = 55.
  constexpr size_t kSize = 55;
  if (traceparent.size() < kSize) return "";
  const absl::string_view version = traceparent.substr(0, 2);
  if (!LowerHex(version) || version == "ff") return "";
  if (version == "00" && traceparent.size() != kSize) return "";
  if (traceparent.size() > kSize && traceparent[kSize] != '-') return "";
  if (traceparent[2] != '-' || traceparent[35] != '-' ||
      traceparent[52] != '-') {
    return "";
  }
  const absl::string_view trace_id = traceparent.substr(3, 32);
  const absl::string_view parent_id = traceparent.substr(36, 16);
  const absl::string_view flags = traceparent.substr(53, 2);
  if (!LowerHex(trace_id) || !LowerHex(parent_id) || !LowerHex(flags) ||
      AllZero(trace_id) || AllZero(parent_id)) {
    return "";
  }
  return std::string(trace_id);
}

std::string TraceIdOf(const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("traceparent");
  if (it == metadata.end()) return "";
  return TraceIdOf(absl::string_view(it->second.data(), it->second.size()));
}

}  // namespace fencegate
