// Copyright fencegate authors.

#include "postgres/sql_parse.h"

#include <pg_query.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/io/coded_stream.h"

namespace fencegate::postgres {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// Stack kept free below a parse for everything else: protobuf's recursive
// decoding of up to kMaxSqlTreeDepth levels (about 300 bytes a level;
// about 3 KB under the sanitizers, whose frames are larger), the
// classifiers' own frames.
constexpr size_t kStackMarginBytes = kSanitized ? (4 << 20) : (512 << 10);

// The lowest address of the calling thread's stack; null if unknown.
char* StackLow() {
  thread_local char* const low = [] {
    char* found = nullptr;
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      void* addr = nullptr;
      size_t size = 0;
      if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
        found = static_cast<char*>(addr);
      }
      pthread_attr_destroy(&attr);
    }
    return found;
  }();
  return low;
}

absl::StatusOr<pg_query::ParseResult> ParseHere(absl::string_view sql) {
  // libpg_query reads a C string.
  const std::string text(sql);
  PgQueryProtobufParseResult parsed = pg_query_parse_protobuf(text.c_str());
  absl::StatusOr<pg_query::ParseResult> result;
  if (parsed.error != nullptr) {
    result = absl::InvalidArgumentError(absl::StrCat(
        "does not parse: ",
        parsed.error->message != nullptr ? parsed.error->message
                                         : "unknown error",
        parsed.error->cursorpos > 0
            ? absl::StrCat(" (at character ", parsed.error->cursorpos, ")")
            : std::string()));
  } else {
    pg_query::ParseResult tree;
    google::protobuf::io::CodedInputStream in(
        reinterpret_cast<const uint8_t*>(parsed.parse_tree.data),
        static_cast<int>(parsed.parse_tree.len));
    in.SetRecursionLimit(kMaxSqlTreeDepth);
    if (!tree.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage()) {
      // What was read of it is kMaxSqlTreeDepth levels deep.
      Flatten(tree);
      result = absl::InvalidArgumentError(
          absl::StrCat("nests deeper than ", kMaxSqlTreeDepth, " levels"));
    } else {
      result = std::move(tree);
    }
  }
  pg_query_free_protobuf_parse_result(parsed);
  return result;
}

// True on the long-text parser's thread, whose stack holds any text.
thread_local bool on_long_parser = false;

// The thread that parses text too long for its caller's stack, and runs
// the work queued for it (RunOnLongTextParser), one piece at a time, in
// order, on a stack sized for kMaxSqlBytes. Made on first use, never
// destroyed (work may be queued until the process exits).
class LongParser {
 public:
  static LongParser& Get() {
    static LongParser* const parser = new LongParser;
    return *parser;
  }

  // Queues `work`; false (and `work` untouched) if the thread could not be
  // started.
  bool Queue(absl::AnyInvocable<void() &&>& work) ABSL_LOCKS_EXCLUDED(mu_) {
    if (!started_) return false;
    absl::MutexLock lock(&mu_);
    work_.push_back(std::move(work));
    return true;
  }

 private:
  static constexpr size_t kStackBytes =
      kMaxSqlBytes * kStackBytesPerSqlByte + 2 * kStackMarginBytes;

  LongParser() {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, kStackBytes);
    pthread_t thread;
    started_ = pthread_create(&thread, &attr, &LongParser::Main, this) == 0;
    pthread_attr_destroy(&attr);
    if (started_) {
      pthread_setname_np(thread, "fg-sql-parse");
      pthread_detach(thread);
    }
  }

  static void* Main(void* self) {
    on_long_parser = true;
    static_cast<LongParser*>(self)->Loop();
    return nullptr;
  }

  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !work_.empty();
  }

  void Loop() ABSL_LOCKS_EXCLUDED(mu_) {
    for (;;) {
      absl::AnyInvocable<void() &&> work;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &LongParser::HasWork));
        work = std::move(work_.front());
        work_.pop_front();
      }
      std::move(work)();
      GiveStackBack();
    }
  }

  // The pages a long parse touched, below this frame, back to the system:
  // a 1 MiB text may have used a quarter of a GiB.
  static void GiveStackBack() {
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    char* low = StackLow();
    if (low == nullptr) return;
    // Whole pages only: the first page boundary above the stack's base, the
    // last one below this frame's margin.
    low += (page - reinterpret_cast<uintptr_t>(low) % page) % page;
    char* high =
        static_cast<char*>(__builtin_frame_address(0)) - kStackMarginBytes;
    high -= reinterpret_cast<uintptr_t>(high) % page;
    if (high <= low) return;
    // Best effort: pages not given back stay mapped to this thread alone.
    madvise(low, static_cast<size_t>(high - low), MADV_DONTNEED);
  }

  bool started_ = false;
  absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> work_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

size_t StackLeft() {
  const char* low = StackLow();
  const auto* here = static_cast<const char*>(__builtin_frame_address(0));
  return low != nullptr && here > low ? static_cast<size_t>(here - low) : 0;
}

absl::StatusOr<pg_query::ParseResult> ParseSql(absl::string_view sql) {
  if (sql.size() > kMaxSqlBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("is ", sql.size(), " bytes of SQL text; at most ",
                     kMaxSqlBytes, " are parsed"));
  }
  if (on_long_parser ||
      sql.size() * kStackBytesPerSqlByte + kStackMarginBytes <= StackLeft()) {
    return ParseHere(sql);
  }
  absl::Mutex mu;
  bool done = false;
  absl::StatusOr<pg_query::ParseResult> result =
      absl::UnknownError("not parsed");
  absl::AnyInvocable<void()&&> work = [&] {
    absl::StatusOr<pg_query::ParseResult> parsed = ParseHere(sql);
    absl::MutexLock lock(&mu);
    result = std::move(parsed);
    done = true;
  };
  if (!LongParser::Get().Queue(work)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "SQL text of ", sql.size(),
        " bytes needs the long-text parser, whose thread could not be "
        "started"));
  }
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(&done));
  return result;
}

void RunOnLongTextParser(absl::AnyInvocable<void() &&> work) {
  if (!LongParser::Get().Queue(work)) std::move(work)();
}

void ForEachNode(const Message& root,
                 absl::FunctionRef<void(const Message&)> visit) {
  std::vector<const Message*> pending = {&root};
  std::vector<const FieldDescriptor*> fields;
  while (!pending.empty()) {
    const Message* m = pending.back();
    pending.pop_back();
    visit(*m);
    const Reflection* reflection = m->GetReflection();
    fields.clear();
    reflection->ListFields(*m, &fields);
    for (const FieldDescriptor* f : fields) {
      if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
      if (f->is_repeated()) {
        const int n = reflection->FieldSize(*m, f);
        for (int i = 0; i < n; ++i) {
          pending.push_back(&reflection->GetRepeatedMessage(*m, f, i));
        }
      } else {
        pending.push_back(&reflection->GetMessage(*m, f));
      }
    }
  }
}

void Flatten(Message& root) {
  std::vector<std::unique_ptr<Message>> pending;
  std::vector<const FieldDescriptor*> fields;
  // Moves every sub-message of `m` to `pending`, leaving `m` a leaf.
  auto detach = [&](Message& m) {
    const Reflection* reflection = m.GetReflection();
    fields.clear();
    reflection->ListFields(m, &fields);
    for (const FieldDescriptor* f : fields) {
      if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
      if (f->is_repeated()) {
        while (reflection->FieldSize(m, f) > 0) {
          pending.emplace_back(reflection->ReleaseLast(&m, f));
        }
      } else {
        pending.emplace_back(reflection->ReleaseMessage(&m, f));
      }
    }
  };
  detach(root);
  while (!pending.empty()) {
    std::unique_ptr<Message> m = std::move(pending.back());
    pending.pop_back();
    detach(*m);
  }  // Each is destroyed as a leaf.
}

const std::string& CalledName(const pg_query::FuncCall& call) {
  static const auto* const kNone = new std::string;
  if (call.funcname().empty() || !call.funcname().rbegin()->has_string()) {
    return *kNone;
  }
  return call.funcname().rbegin()->string().sval();
}

}  // namespace fencegate::postgres
