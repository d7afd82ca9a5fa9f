// Copyright fencegate authors.

#include "storage_adapters/noop/config.h"

#include "absl/strings/str_cat.h"

namespace fencegate {
namespace {

class NoopAdapter final : public StorageAdapter {
 public:
  absl::Status Validate(const WriteTarget&,
                        const Operations& ops) const override {
    for (int i = 0; i < ops.size(); ++i) {
      if (ops[i].op_case() == v1::Operation::OP_NOT_SET) {
        return absl::InvalidArgumentError(
            absl::StrCat("ops[", i, "]: no operation set"));
      }
    }
    return absl::OkStatus();
  }
  // One empty result per operation; nothing is stored.
  absl::Status Apply(const WriteTarget&, const Operations& ops,
                     OpResults* results) override {
    for (int i = 0; i < ops.size(); ++i) results->Add();
    return absl::OkStatus();
  }
  // The default ApplyAsync runs Apply, which only fills results.
  bool ApplyAsyncNeverBlocks() const override { return true; }
};

}  // namespace

absl::StatusOr<std::unique_ptr<StorageAdapter>> CreateNoopAdapter(
    const Uri& uri, const AdapterContext& context) {
  if (!uri.authority.empty() || !uri.path.empty() || !uri.query.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("adapter URI \"", uri.redacted,
                     "\": the no-op adapter is just noop://"));
  }
  return std::unique_ptr<StorageAdapter>(std::make_unique<NoopAdapter>());
}

}  // namespace fencegate
