// Copyright fencegate authors.

#include "pgport/response_queue.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "postgres/sqlstates.h"

namespace fencegate::pgport {
namespace {

bool IsAsync(char type) { return type == 'N' || type == 'S' || type == 'A'; }

// Whether `type` may come while `awaited` is answered, and whether it ends
// that answer (for kQuery: ends the statement).
bool Accepts(Awaited awaited, char type, bool described_parameters,
             bool* ends) {
  *ends = false;
  switch (awaited) {
    case Awaited::kParse:
      *ends = type == '1';
      return *ends;
    case Awaited::kBind:
      *ends = type == '2';
      return *ends;
    case Awaited::kClose:
      *ends = type == '3';
      return *ends;
    case Awaited::kDescribePortal:
      *ends = type == 'T' || type == 'n';
      return *ends;
    case Awaited::kDescribeStatement:
      if (type == 't') return !described_parameters;
      *ends = type == 'T' || type == 'n';
      return *ends;
    case Awaited::kExecute:
    case Awaited::kQuery:
      if (type == 'C' || type == 'I' ||
          (awaited == Awaited::kExecute && type == 's')) {
        *ends = true;
        return true;
      }
      return type == 'D' || type == 'G' || type == 'H' || type == 'W' ||
             type == 'd' || type == 'c' ||
             (awaited == Awaited::kQuery && type == 'T');
    case Awaited::kSync:
    case Awaited::kLocal:
      return false;
  }
  return false;
}

absl::string_view WholeMessage(const pgwire::Frame& frame) {
  return absl::string_view(frame.body.data() - pgwire::kHeaderBytes,
                           frame.size);
}

}  // namespace

void ResponseQueue::Push(Expected expected, std::string* to_client) {
  if (expected.awaited == Awaited::kLocal && queue_.empty()) {
    to_client->append(expected.local_reply);
    return;
  }
  queue_.push_back(std::move(expected));
}

void ResponseQueue::PopHead(std::string* to_client) {
  queue_.pop_front();
  statement_ = 0;
  query_failed_ = false;
  described_parameters_ = false;
  while (!queue_.empty() && queue_.front().awaited == Awaited::kLocal) {
    to_client->append(queue_.front().local_reply);
    queue_.pop_front();
  }
}

void ResponseQueue::SkipToSync(std::string* to_client) {
  // Pops the head and what the server will now skip -- every message up to
  // the next Sync, a Query included (PostgreSQL reads and drops all of
  // them) -- stopping before that Sync or a local reply; PopHead then
  // releases local replies.
  while (queue_.size() > 1 && queue_[1].awaited != Awaited::kSync &&
         queue_[1].awaited != Awaited::kLocal) {
    queue_.erase(queue_.begin() + 1);
  }
  PopHead(to_client);
}

absl::Status ResponseQueue::OnReply(const pgwire::Frame& frame,
                                    ReplyOutcome* outcome) {
  const absl::string_view whole = WholeMessage(frame);
  if (IsAsync(frame.type)) {
    absl::StrAppend(&outcome->to_client, whole);
    return absl::OkStatus();
  }
  if (queue_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the server sent a message of type '",
        absl::string_view(&frame.type, 1), "' that nothing asked for"));
  }
  Expected& head = queue_.front();
  const bool own_statement = head.awaited == Awaited::kQuery &&
                             statement_ < head.own_statements.size() &&
                             head.own_statements[statement_];
  const bool dropped = head.own || own_statement;
  if (frame.type == 'E') {
    if (head.result != nullptr) {
      if (head.result->error_code.empty()) {
        absl::StatusOr<pgwire::BackendMessage> parsed =
            pgwire::ParseBackendMessage(frame);
        if (!parsed.ok()) return parsed.status();
        const auto& error = std::get<pgwire::ErrorResponse>(*parsed);
        const absl::string_view* code = error.Find('C');
        const absl::string_view* message = error.Find('M');
        head.result->error_code =
            code != nullptr ? std::string(*code)
                            : std::string(postgres::kInternalErrorSqlState);
        head.result->error_message =
            message != nullptr ? std::string(*message) : std::string();
      }
    } else if (!head.replacement_error.empty()) {
      outcome->to_client.append(head.replacement_error);
    } else {
      absl::StrAppend(&outcome->to_client, whole);
      outcome->own_error = dropped;
    }
    if (head.awaited == Awaited::kQuery) {
      query_failed_ = true;
    } else if (head.awaited != Awaited::kSync) {
      SkipToSync(&outcome->to_client);
    }
    return absl::OkStatus();
  }
  if (frame.type == 'Z') {
    if (head.awaited != Awaited::kQuery && head.awaited != Awaited::kSync) {
      return absl::InvalidArgumentError(
          "the server sent ReadyForQuery before the replies it owed");
    }
    if (frame.body.size() != 1) {
      return absl::InvalidArgumentError("malformed ReadyForQuery message");
    }
    if (!head.own) absl::StrAppend(&outcome->to_client, whole);
    if (head.result != nullptr) head.result->done = true;
    PopHead(&outcome->to_client);
    if (queue_.empty()) {
      outcome->settled = static_cast<pgwire::TransactionStatus>(frame.body[0]);
    }
    return absl::OkStatus();
  }
  bool ends = false;
  if (query_failed_ ||
      !Accepts(head.awaited, frame.type, described_parameters_, &ends)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the server sent a message of type '",
                     absl::string_view(&frame.type, 1), "' out of turn"));
  }
  if (!dropped) absl::StrAppend(&outcome->to_client, whole);
  if (frame.type == 'D' && head.result != nullptr &&
      !head.result->value.has_value()) {
    absl::StatusOr<pgwire::BackendMessage> parsed =
        pgwire::ParseBackendMessage(frame);
    if (!parsed.ok()) return parsed.status();
    const auto& row = std::get<pgwire::DataRow>(*parsed);
    if (!row.values.empty() && row.values[0].has_value()) {
      head.result->value = std::string(*row.values[0]);
    }
  }
  if (frame.type == 't') described_parameters_ = true;
  if (!ends) return absl::OkStatus();
  if (head.awaited == Awaited::kQuery) {
    ++statement_;
  } else {
    PopHead(&outcome->to_client);
  }
  return absl::OkStatus();
}

}  // namespace fencegate::pgport
