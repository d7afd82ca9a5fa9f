// Copyright fencegate authors.
//
// ResponseQueue: what a session's upstream server still owes, in the order
// the messages that ask for it were sent, and what becomes of each reply.
// The port adds messages of its own to a client's stream (a session's reset
// at its end, a message made to fail in place of one the port refused), so
// it must tell their replies apart
// from the client's: a reply to the port's own message is dropped, an
// error in place of a refused message is replaced by the port's, and every
// other reply goes to the client as it came.
//
// The protocol's rules that this follows: each Parse, Bind, Describe,
// Execute, Close, Sync and Query is answered in order; after an
// ErrorResponse in the extended protocol the server skips every message up
// to the next Sync, a Query included, answering none; a Query's statements end
// one by one (CommandComplete or EmptyQueryResponse) and the Query ends at
// ReadyForQuery, as does a Sync. NoticeResponse, ParameterStatus and
// NotificationResponse may come at any time and always reach the client.
//
// Thread safety: none; one session's strand uses it.

#ifndef PGPORT_RESPONSE_QUEUE_H_
#define PGPORT_RESPONSE_QUEUE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "pgwire/backend.h"
#include "pgwire/frame.h"

namespace fencegate::pgport {

enum class Awaited {
  kParse,              // ParseComplete
  kBind,               // BindComplete
  kDescribeStatement,  // ParameterDescription, then RowDescription or NoData
  kDescribePortal,     // RowDescription or NoData
  kExecute,            // rows, then CommandComplete, EmptyQueryResponse or
                       // PortalSuspended
  kClose,              // CloseComplete
  kSync,               // ReadyForQuery
  kQuery,  // per statement: rows, CommandComplete; then ReadyForQuery
  kLocal,  // nothing from the server: `local_reply` goes to the client
};

// What the server answered a batch of the port's own messages that the
// port waits for (a token change's release and hold): the first column of
// the first row, the first error, and whether the batch's ReadyForQuery
// came.
struct OwnResult {
  bool done = false;
  std::optional<std::string> value;
  std::string error_code;
  std::string error_message;
};

struct Expected {
  Awaited awaited = Awaited::kLocal;
  // The port's own message: its replies are dropped. For kQuery, see
  // `own_statements`.
  bool own = false;
  // kQuery: which of the query's statements are the port's own (their
  // replies are dropped), in order. A Query made wholly of the port's own
  // statements sets `own` instead.
  std::vector<bool> own_statements;
  // Not empty: the message was sent to fail in place of one the port
  // refused; the server's ErrorResponse is replaced by these bytes.
  std::string replacement_error;
  // kLocal: the port's own reply, sent when it comes to the head.
  std::string local_reply;
  // Of the port's own message: where what the server answers goes, rather
  // than to the client (its errors included).
  std::shared_ptr<OwnResult> result;
};

// The Expected of the client's own message.
inline Expected ClientOwed(Awaited awaited) {
  Expected e;
  e.awaited = awaited;
  return e;
}
// Of the port's own message; with `result`, its answer goes there.
inline Expected OwnOwed(Awaited awaited,
                        std::shared_ptr<OwnResult> result = nullptr) {
  Expected e;
  e.awaited = awaited;
  e.own = true;
  e.result = std::move(result);
  return e;
}
// Of a message sent to fail in place of a refused one.
inline Expected Replacing(Awaited awaited, std::string error) {
  Expected e;
  e.awaited = awaited;
  e.replacement_error = std::move(error);
  return e;
}
// The port's own reply, with nothing from the server.
inline Expected LocalReply(std::string reply) {
  Expected e;
  e.local_reply = std::move(reply);
  return e;
}

// What one reply from the server came to.
struct ReplyOutcome {
  // Bytes for the client (possibly none).
  std::string to_client;
  // The server refused one of the port's own messages.
  bool own_error = false;
  // A ReadyForQuery ended the last message the server owed: its status.
  std::optional<pgwire::TransactionStatus> settled;
};

class ResponseQueue {
 public:
  // Appends what one sent message is owed. A kLocal whose turn is already
  // there (nothing owed before it) has its reply appended to `to_client` at
  // once.
  void Push(Expected expected, std::string* to_client);

  // One message from the server. INVALID_ARGUMENT for a reply that nothing
  // sent asked for, or a message that does not parse: the session cannot
  // go on.
  absl::Status OnReply(const pgwire::Frame& frame, ReplyOutcome* outcome);

  // Nothing is owed.
  bool empty() const { return queue_.empty(); }
  size_t size() const { return queue_.size(); }

 private:
  // Pops the head, then releases every kLocal that reaches the head.
  void PopHead(std::string* to_client);
  // After an error in the extended protocol: the server skips to the next
  // Sync, so what the messages before it were owed will not come.
  void SkipToSync(std::string* to_client);

  std::deque<Expected> queue_;
  // kQuery at the head: the index of its statement now answering, and
  // whether an error ended the rest.
  size_t statement_ = 0;
  bool query_failed_ = false;
  // kDescribeStatement at the head: its ParameterDescription came.
  bool described_parameters_ = false;
};

}  // namespace fencegate::pgport

#endif  // PGPORT_RESPONSE_QUEUE_H_
