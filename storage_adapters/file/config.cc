// Copyright fencegate authors.

#include "storage_adapters/file/config.h"

#include <cstddef>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "prometheus/histogram.h"
#include "storage_adapters/file/file_adapter.h"

namespace fencegate {

absl::StatusOr<std::unique_ptr<StorageAdapter>> CreateFileAdapter(
    const Uri& uri, const AdapterContext& context) {
  if (!uri.authority.empty() && uri.authority != "localhost") {
    return absl::InvalidArgumentError(
        absl::StrCat("adapter URI \"", uri.redacted,
                     "\": a file URI has no host; use file:///absolute/path"));
  }
  if (!uri.query.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "adapter URI \"", uri.redacted, "\": file URIs take no parameters"));
  }
  if (uri.path.empty() || uri.path[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("adapter URI \"", uri.redacted,
                     "\": the root must be an absolute path"));
  }
  std::function<void(size_t)> on_group;
  if (context.metrics.enabled()) {
    prometheus::Histogram* group =
        &prometheus::BuildHistogram()
             .Name("fencegate_file_commit_group_writes")
             .Help(
                 "Writes made durable together by a file route's commit "
                 "thread, per group")
             .Register(*context.metrics.registry)
             .Add({{"route", context.route}},
                  prometheus::Histogram::BucketBoundaries{
                      1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024});
    on_group = [group](size_t writes) {
      group->Observe(static_cast<double>(writes));
    };
  }
  absl::StatusOr<std::unique_ptr<FileAdapter>> adapter =
      FileAdapter::Open(uri.path, std::move(on_group));
  if (!adapter.ok()) return adapter.status();
  return std::unique_ptr<StorageAdapter>(*std::move(adapter));
}

}  // namespace fencegate
