// Copyright fencegate authors.
//
// MemoryBudget: a bound on the bytes that requests hold while they wait for
// their domain and run (docs/operations.md, "Limits"), one for both of the
// gateway's ports. gRPC's ResourceQuota bounds what its transport holds; a
// Write it has handed over -- parsed, then queued behind a busy domain -- is
// no longer counted there, so the gateway counts it here: each Write
// reserves its bytes (which gRPC keeps until the reply) and what its parsed
// request holds, estimated from its operations and SQL parameters counted
// on the wire before it is parsed (an empty SQL parameter: 4 bytes there,
// about 80 parsed; gateway/write_request.h), for as long as it lives, and
// the rows an adapter keeps for its reply as they arrive (WriteTarget's
// take_result_memory). A Write that does not fit is refused at once with
// RESOURCE_EXHAUSTED, before it is parsed or queued. The PostgreSQL port
// reserves each large message a session holds (pgport/frame_reader.h).
//
// Thread safety: safe for concurrent use; never blocks.

#ifndef COMMON_MEMORY_BUDGET_H_
#define COMMON_MEMORY_BUDGET_H_

#include <atomic>
#include <cstddef>

#include "absl/status/statusor.h"

namespace fencegate {

class MemoryBudget {
 public:
  explicit MemoryBudget(size_t limit_bytes) : limit_(limit_bytes) {}
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // Bytes held until destroyed (or moved from).
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept;
    Reservation& operator=(Reservation&& other) noexcept;
    ~Reservation();

   private:
    friend class MemoryBudget;
    Reservation(MemoryBudget* budget, size_t bytes)
        : budget_(budget), bytes_(bytes) {}
    MemoryBudget* budget_ = nullptr;
    size_t bytes_ = 0;
  };

  // Reserves `bytes`; RESOURCE_EXHAUSTED, saying how much is held and the
  // limit, if they would take the total past it. A reservation larger than
  // the whole limit is refused too.
  absl::StatusOr<Reservation> Reserve(size_t bytes);

  // Bytes reserved now.
  size_t used() const { return used_.load(std::memory_order_relaxed); }
  size_t limit() const { return limit_; }

 private:
  void Release(size_t bytes) {
    used_.fetch_sub(bytes, std::memory_order_relaxed);
  }

  const size_t limit_;
  std::atomic<size_t> used_{0};
};

}  // namespace fencegate

#endif  // COMMON_MEMORY_BUDGET_H_
