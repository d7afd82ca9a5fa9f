// Copyright fencegate authors.
//
// AdapterRegistry: builds storage adapters from URIs, by scheme. Filled by an
// explicit RegisterBuiltinAdapters() call (storage_adapters/builtin.h), not by
// static initializers, which static linking can silently drop.

#ifndef STORAGE_ADAPTERS_REGISTRY_H_
#define STORAGE_ADAPTERS_REGISTRY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "fencegate/common/uri.h"
#include "google/protobuf/message.h"
#include "metrics/metrics_context.h"
#include "storage_adapters/storage_adapter.h"

namespace fencegate {

namespace postgres {
class SqlClassifier;
}  // namespace postgres

// What an adapter is handed beside its URI.
struct AdapterContext {
  // The route the adapter serves (the `route` label of its metrics).
  // Default: empty (an adapter outside any route, e.g. in a test).
  std::string route;
  // Where it registers its metrics; empty when metrics are off.
  MetricsContext metrics;
  // Told what an operator should know and no caller is told (a Write that
  // changed its pooled session, say), from any of the adapter's threads; it
  // must not block. Default: none.
  std::function<void(const std::string&)> on_warning;
  // The route's typed settings from the configuration file, or null; when
  // set, of the message type the scheme was registered with (Create checks).
  // The factory merges them with its URI's query, the shorthand form.
  const google::protobuf::Message* settings = nullptr;
  // The gateway's SQL classifier (postgres/sql_classifier.h), which the
  // PostgreSQL port shares; null: an adapter that classifies SQL keeps its
  // own. Not owned; outlives the adapter.
  postgres::SqlClassifier* sql_classifier = nullptr;
};

// Builds an adapter from a parsed URI whose scheme matched. Validates the
// whole URI: INVALID_ARGUMENT quoting it when malformed, UNAVAILABLE when the
// storage cannot be reached at start-up.
using AdapterFactory =
    std::function<absl::StatusOr<std::unique_ptr<StorageAdapter>>(
        const Uri&, const AdapterContext&)>;

// Thread safety: Register() must complete before concurrent Create() calls;
// Create() is then safe for concurrent use.
class AdapterRegistry {
 public:
  AdapterRegistry() = default;
  AdapterRegistry(const AdapterRegistry&) = delete;
  AdapterRegistry& operator=(const AdapterRegistry&) = delete;

  // ALREADY_EXISTS if `scheme` is registered. `settings`: the message type
  // of the scheme's typed settings (AdapterContext::settings), or null for
  // an adapter that has none.
  absl::Status Register(std::string scheme, AdapterFactory factory,
                        const google::protobuf::Descriptor* settings = nullptr);

  // Parses `uri` and calls its scheme's factory. INVALID_ARGUMENT, quoting the
  // URI and listing the known schemes, for an unknown scheme, and naming the
  // type for settings of a type the scheme does not take.
  absl::StatusOr<std::unique_ptr<StorageAdapter>> Create(
      absl::string_view uri, const AdapterContext& context = {}) const;
  // The same for a URI parsed already.
  absl::StatusOr<std::unique_ptr<StorageAdapter>> Create(
      const Uri& uri, const AdapterContext& context = {}) const;

  // Registered schemes, sorted.
  std::vector<std::string> Schemes() const;

 private:
  struct Entry {
    AdapterFactory factory;
    const google::protobuf::Descriptor* settings;
  };
  absl::flat_hash_map<std::string, Entry> factories_;
};

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_REGISTRY_H_
