// Copyright fencegate authors.
//
// Registers the token watchers fencegate ships: "etcd" and "zookeeper".

#ifndef TOKEN_WATCHERS_BUILTIN_H_
#define TOKEN_WATCHERS_BUILTIN_H_

#include "absl/status/status.h"
#include "token_watchers/registry.h"

namespace fencegate {

// ALREADY_EXISTS if one of them is registered already.
absl::Status RegisterBuiltinWatchers(TokenWatcherRegistry& registry);

}  // namespace fencegate

#endif  // TOKEN_WATCHERS_BUILTIN_H_
