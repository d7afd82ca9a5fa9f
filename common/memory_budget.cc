// Copyright fencegate authors.

#include "fencegate/common/memory_budget.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace fencegate {

MemoryBudget::Reservation::Reservation(Reservation&& other) noexcept
    : budget_(std::exchange(other.budget_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

MemoryBudget::Reservation& MemoryBudget::Reservation::operator=(
    Reservation&& other) noexcept {
  if (this != &other) {
    if (budget_ != nullptr) budget_->Release(bytes_);
    budget_ = std::exchange(other.budget_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

MemoryBudget::Reservation::~Reservation() {
  if (budget_ != nullptr) budget_->Release(bytes_);
}

absl::StatusOr<MemoryBudget::Reservation> MemoryBudget::Reserve(size_t bytes) {
  size_t used = used_.load(std::memory_order_relaxed);
  do {
    if (bytes > limit_ || used > limit_ - bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the gateway holds ", used >> 20, " MiB of requests already (",
          "half of memory_limit_mib: ", limit_ >> 20, " MiB); this one needs ",
          (bytes + (1 << 20) - 1) >> 20, " MiB more; retry later"));
    }
  } while (!used_.compare_exchange_weak(used, used + bytes,
                                        std::memory_order_relaxed));
  return Reservation(this, bytes);
}

}  // namespace fencegate
