// Copyright fencegate authors.
//
// The W3C Trace Context a caller may send: its `traceparent` request
// metadata ("00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>"). The
// gateway logs the trace id beside the request_id, so that a request can be
// found from the caller's trace (docs/operations.md, "Logs").

#ifndef OBSERVABILITY_TRACE_CONTEXT_H_
#define OBSERVABILITY_TRACE_CONTEXT_H_

#include <string>

#include "absl/strings/string_view.h"
#include "grpcpp/server_context.h"

namespace fencegate {

// The trace id of a well-formed `traceparent` value (lowercase hex, not all
// zeros, version not "ff"); empty otherwise. Later versions are read by
// their version-00 prefix, as the recommendation asks.
std::string TraceIdOf(absl::string_view traceparent);

// The trace id of the call's traceparent metadata; empty if it has none or
// a malformed one.
std::string TraceIdOf(const grpc::ServerContextBase& context);

}  // namespace fencegate

#endif  // OBSERVABILITY_TRACE_CONTEXT_H_
