// Copyright fencegate authors.
//
// HoldTally: which domains a route's connections hold (held_domains.h), at
// which token, counted over all of them, so that a Write or a raise with
// another token finds at once that the route's own holders must give the
// domain up first -- without looking at each connection, and without
// waiting for the raise watch to see the raise wait in the server.
//
// A domain counts from the moment its connection learns that it holds the
// domain's lock (the batch of the Write whose fence_hold() took it, or
// may have, is read) until the connection's release of it went out, or the
// connection ended; its token is the last one held. A raise that comes
// between a hold and its batch's end finds the domain uncounted, and waits
// for the raise watch.
//
// Thread safety: safe for concurrent use; its lock is a leaf (nothing is
// called with it held).

#ifndef STORAGE_ADAPTERS_POSTGRES_HOLD_TALLY_H_
#define STORAGE_ADAPTERS_POSTGRES_HOLD_TALLY_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace fencegate::postgres {

class HoldTally {
 public:
  // A connection holds `domain` now, at `token` (0: unknown), or holds it
  // at another token than before (`added` false).
  void Held(absl::string_view domain, uint64_t token, bool added);
  // A connection holds `domain` no more.
  void Gone(absl::string_view domain);
  // True if some connection may hold `domain` at a token below `token`
  // (or an unknown one): its holders must give it up before `token`'s
  // raise. A lower token is stale, and raises nothing.
  bool HeldBelow(absl::string_view domain, uint64_t token) const;
  // True if some connection may hold `domain`.
  bool HeldAtAll(absl::string_view domain) const;
  // The domains some connection may hold.
  size_t size() const;

 private:
  struct Entry {
    int holders = 0;
    uint64_t token = 0;
  };
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fencegate::postgres

#endif  // STORAGE_ADAPTERS_POSTGRES_HOLD_TALLY_H_
