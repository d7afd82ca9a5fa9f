// Copyright fencegate authors.
//
// HeldDomains: the domains one gRPC-route connection holds in the
// database (the route's held fence, docs/postgres.md), and those it owes
// the database a release of. A Write of (D, T) on a connection that holds
// D at T goes out with no fence statement: the connection's shared lock on
// D, which every raise of D takes exclusively first, keeps the row at T.
// Otherwise the Write calls fence_hold() (fence_hold.h), and once it
// commits the connection holds D at T.
//
// At most `bound` domains are held; the least recently used one past it is
// owed a release. A domain whose Write with fence_hold() failed is owed one
// too, since the lock, a session's, may have outlived the rolled-back
// transaction. Releases go out before the connection's next batch.
//
// Each domain that comes or goes (held, or owed a release) is told to the
// route's HoldTally, if one is given.
//
// Thread safety: none; the connection's owner's lock guards it.

#ifndef STORAGE_ADAPTERS_POSTGRES_HELD_DOMAINS_H_
#define STORAGE_ADAPTERS_POSTGRES_HELD_DOMAINS_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "storage_adapters/postgres/hold_tally.h"

namespace fencegate::postgres {

class HeldDomains {
 public:
  explicit HeldDomains(size_t bound, HoldTally* tally = nullptr)
      : bound_(bound), tally_(tally) {}
  HeldDomains(const HeldDomains&) = delete;
  HeldDomains& operator=(const HeldDomains&) = delete;
  ~HeldDomains() { Clear(); }

  // Clear(), then holds at most `bound` domains from now on, telling
  // `tally`.
  void Reset(size_t bound, HoldTally* tally) {
    Clear();
    bound_ = bound;
    tally_ = tally;
  }

  // True if `domain` is held at `token`; it becomes the most recently used.
  bool Use(absl::string_view domain, uint64_t token);
  // `domain` is held at `token` now (a Write with fence_hold() committed);
  // it becomes the most recently used, and the least recently used past
  // the bound is owed a release. With a bound of 0 nothing is kept.
  void Held(absl::string_view domain, uint64_t token);
  // `domain` is held no more as far as Writes go, and is owed a release.
  void Release(absl::string_view domain);
  // Whether `domain` is held, or owed a release.
  bool Holds(absl::string_view domain) const;
  // The releases owed, oldest first; owed no more once taken.
  std::vector<std::string> TakeReleases();
  // The domains held or owed a release.
  std::vector<std::string> Domains() const;
  // Nothing is held or owed any more (the session's locks are gone, or
  // the connection is).
  void Clear();

  size_t held() const { return order_.size(); }
  size_t owed() const { return owed_.size(); }

 private:
  void Owe(std::string domain);
  bool Present(absl::string_view domain) const { return Holds(domain); }

  size_t bound_;
  HoldTally* tally_;
  // Most recently used first.
  std::list<std::pair<std::string, uint64_t>> order_;
  absl::flat_hash_map<std::string, decltype(order_)::iterator> index_;
  std::vector<std::string> owed_;
};

}  // namespace fencegate::postgres

#endif  // STORAGE_ADAPTERS_POSTGRES_HELD_DOMAINS_H_
