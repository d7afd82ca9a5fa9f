// Copyright fencegate authors.
//
// Makes absl's synchronization visible to ThreadSanitizer in a TSan build.
// A workaround for Debian 12's absl (20220623, not built with
// -fsanitize=thread), retired by an absl built with TSan, or by a TSan
// build of the gateway against a vendored absl (not allowed here).
//
// Debian's absl is not built with -fsanitize=thread, so its Mutex, CondVar
// and Notification synchronize with atomics TSan never sees: every access
// guarded by an absl::Mutex would be reported as a race. Linked only into
// TSan test binaries, this file defines the same symbols as the shared
// library (the executable's definition wins the dynamic lookup, for calls
// from our code, gRPC and absl alike), forwards each call to the library's
// own function found with dlsym(RTLD_NEXT), and tells TSan what the call
// means: taking a lock acquires, releasing one releases, and a wait releases
// before and acquires after. absl evaluates a Condition with the mutex held,
// on the waiting thread or on one that is unlocking; each Condition is
// wrapped so that its evaluation acquires and releases too. Reader locks
// acquire and release like writer locks: readers are ordered after each
// other, which hides a write made under a reader lock (a bug of its own),
// never a race between writers. TSan sees these as plain acquire/release,
// not as locks, so its lock-order (deadlock) checks do not run here.
//
// The mangled names are those of Debian 12's absl (inline namespace
// "debian3"); a static_assert below fails the build if that changes.

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "absl/base/config.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

#define FG_STRINGIZE_(x) #x
#define FG_STRINGIZE(x) FG_STRINGIZE_(x)
static_assert(ABSL_OPTION_USE_INLINE_NAMESPACE == 1 &&
                  std::string_view(FG_STRINGIZE(
                      ABSL_OPTION_INLINE_NAMESPACE_NAME)) == "debian3",
              "tsan_absl_sync.cc names Debian 12's absl symbols");

extern "C" {
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
}

namespace {

template <typename Fn>
Fn Next(const char* mangled) {
  void* f = ::dlsym(RTLD_NEXT, mangled);
  if (f == nullptr) {
    std::fprintf(stderr, "FATAL tsan_absl_sync: %s not found\n", mangled);
    std::abort();
  }
  return reinterpret_cast<Fn>(f);
}

// The address a Notification's inline HasBeenNotified() loads with acquire
// order: releasing it lets that load synchronize with Notify().
struct NotificationLayout {
  absl::Mutex mutex;
  std::atomic<bool> notified_yet;
};
static_assert(sizeof(NotificationLayout) == sizeof(absl::Notification));

void* NotifiedFlag(const absl::Notification* n) {
  return &reinterpret_cast<NotificationLayout*>(
              const_cast<absl::Notification*>(n))
              ->notified_yet;
}

// A Condition that tells TSan the mutex is held while `inner` is evaluated.
struct HeldCondition {
  HeldCondition(const absl::Condition& c, absl::Mutex* m)
      : inner(&c), mu(m), outer(&HeldCondition::Eval, this) {}
  static bool Eval(HeldCondition* self) {
    __tsan_acquire(self->mu);
    const bool met = self->inner->Eval();
    __tsan_release(self->mu);
    return met;
  }
  const absl::Condition* inner;
  absl::Mutex* mu;
  absl::Condition outer;
};

// absl's deadlock detection (on in Debian's build) keeps its graph under a
// spin lock TSan cannot see; the suites are not checked for lock order
// here.
const bool kDeadlockDetectionOff = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}();

}  // namespace

#define FG_NEXT(type, mangled)                  \
  static const auto real = Next<type>(mangled); \
  (void)0

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  FG_NEXT(void (*)(Mutex*), "_ZN4absl7debian35Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::Unlock() {
  FG_NEXT(void (*)(Mutex*), "_ZN4absl7debian35Mutex6UnlockEv");
  __tsan_release(this);
  real(this);
}

void Mutex::ReaderLock() {
  FG_NEXT(void (*)(Mutex*), "_ZN4absl7debian35Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::ReaderUnlock() {
  FG_NEXT(void (*)(Mutex*), "_ZN4absl7debian35Mutex12ReaderUnlockEv");
  __tsan_release(this);
  real(this);
}

bool Mutex::TryLock() {
  FG_NEXT(bool (*)(Mutex*), "_ZN4absl7debian35Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

bool Mutex::ReaderTryLock() {
  FG_NEXT(bool (*)(Mutex*), "_ZN4absl7debian35Mutex13ReaderTryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::LockWhen(const Condition& cond) {
  FG_NEXT(void (*)(Mutex*, const Condition&),
          "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE");
  HeldCondition held(cond, this);
  real(this, held.outer);
  __tsan_acquire(this);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  FG_NEXT(void (*)(Mutex*, const Condition&),
          "_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE");
  HeldCondition held(cond, this);
  real(this, held.outer);
  __tsan_acquire(this);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, absl::Duration d) {
  FG_NEXT(bool (*)(Mutex*, const Condition&, absl::Duration),
          "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_"
          "9ConditionENS0_8DurationE");
  HeldCondition held(cond, this);
  const bool met = real(this, held.outer, d);
  __tsan_acquire(this);
  return met;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, absl::Time t) {
  FG_NEXT(bool (*)(Mutex*, const Condition&, absl::Time),
          "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_"
          "9ConditionENS0_4TimeE");
  HeldCondition held(cond, this);
  const bool met = real(this, held.outer, t);
  __tsan_acquire(this);
  return met;
}

void Mutex::Await(const Condition& cond) {
  FG_NEXT(void (*)(Mutex*, const Condition&),
          "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  HeldCondition held(cond, this);
  __tsan_release(this);
  real(this, held.outer);
  __tsan_acquire(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration d) {
  FG_NEXT(bool (*)(Mutex*, const Condition&, absl::Duration),
          "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_"
          "9ConditionENS0_8DurationE");
  __tsan_release(this);
  HeldCondition held(cond, this);
  const bool met = real(this, held.outer, d);
  __tsan_acquire(this);
  return met;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, absl::Time t) {
  FG_NEXT(bool (*)(Mutex*, const Condition&, absl::Time),
          "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_"
          "9ConditionENS0_4TimeE");
  __tsan_release(this);
  HeldCondition held(cond, this);
  const bool met = real(this, held.outer, t);
  __tsan_acquire(this);
  return met;
}

void CondVar::Wait(Mutex* mu) {
  FG_NEXT(void (*)(CondVar*, Mutex*),
          "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration d) {
  FG_NEXT(bool (*)(CondVar*, Mutex*, absl::Duration),
          "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_"
          "8DurationE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, d);
  __tsan_acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time t) {
  FG_NEXT(bool (*)(CondVar*, Mutex*, absl::Time),
          "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_"
          "4TimeE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, t);
  __tsan_acquire(mu);
  return timed_out;
}

void Notification::Notify() {
  FG_NEXT(void (*)(Notification*), "_ZN4absl7debian312Notification6NotifyEv");
  __tsan_release(this);
  __tsan_release(NotifiedFlag(this));
  real(this);
}

void Notification::WaitForNotification() const {
  FG_NEXT(void (*)(const Notification*),
          "_ZNK4absl7debian312Notification19WaitForNotificationEv");
  real(this);
  __tsan_acquire(const_cast<Notification*>(this));
}

bool Notification::WaitForNotificationWithTimeout(absl::Duration d) const {
  FG_NEXT(bool (*)(const Notification*, absl::Duration),
          "_ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_"
          "8DurationE");
  const bool notified = real(this, d);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(absl::Time t) const {
  FG_NEXT(
      bool (*)(const Notification*, absl::Time),
      "_ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_"
      "4TimeE");
  const bool notified = real(this, t);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl
