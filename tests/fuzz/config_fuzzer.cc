// Copyright fencegate authors.
//
// Fuzzes the gateway's config file text: the text-format parse and
// ResolveOptions (every field's validation), with data_dir pointed at a
// scratch directory so that nothing is created elsewhere. Checks, beyond "no
// crash, no UB, no leak": parsing is deterministic.

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "fencegate/common/text_proto.h"
#include "gateway/config.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  fencegate::v1::GatewayConfig config, again;
  const absl::Status parsed =
      fencegate::ParseTextProto(text, "config file", &config);
  FG_FUZZ_CHECK(parsed.code() ==
                fencegate::ParseTextProto(text, "config file", &again).code());
  if (!parsed.ok()) return 0;
  config.set_data_dir(fencegate::fuzz::ScratchDir("config") + "/data");
  for (auto& route : *config.mutable_routes()) {
    // A file route's root is created when the gateway starts, not here; keep
    // it inside the scratch directory anyway.
    if (absl::string_view(route.uri()).substr(0, 7) == "file://") {
      route.set_uri("file://" + fencegate::fuzz::ScratchDir("config") +
                    "/files");
    }
  }
  (void)fencegate::ResolveOptions(config);
  return 0;
}
