// Copyright fencegate authors.
//
// FrameReader: whole protocol messages (pgwire/frame.h) read from a socket,
// as a coroutine on the socket's executor. It keeps what it read past the
// last message for the next call, so a client's pipelined batch is read
// once and handed out message by message (Buffered), and the port can send
// the batch upstream in one write.
//
// Thread safety: none; one coroutine at a time reads through it.

#ifndef PGPORT_FRAME_READER_H_
#define PGPORT_FRAME_READER_H_

#include <cstddef>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "pgport/asio.h"
#include "pgwire/frame.h"

namespace fencegate::pgport {

class FrameReader {
 public:
  // Messages past `max_message_bytes` (header included) are refused.
  explicit FrameReader(size_t max_message_bytes)
      : max_message_bytes_(max_message_bytes) {}

  // The next message, reading from `socket` as needed. The frame points
  // into the reader and is valid until its next call. `startup`: a
  // startup-phase packet (no type byte). UNAVAILABLE when the peer closed
  // or the read failed; INVALID_ARGUMENT or RESOURCE_EXHAUSTED (pgwire's)
  // for a message that cannot be framed.
  asio::awaitable<absl::StatusOr<pgwire::Frame>> Next(tcp::socket& socket,
                                                      bool startup = false);

  // A whole message already read, without reading; nullopt if none.
  absl::StatusOr<std::optional<pgwire::Frame>> Buffered();

  // Bytes read and not yet handed out.
  size_t pending_bytes() const { return buffer_.size() - consumed_; }

 private:
  absl::StatusOr<std::optional<pgwire::Frame>> Split(bool startup);

  const size_t max_message_bytes_;
  std::string buffer_;
  // Bytes of buffer_ handed out already.
  size_t consumed_ = 0;
};

// Writes all of `bytes`; UNAVAILABLE if the write failed.
asio::awaitable<absl::Status> WriteAll(tcp::socket& socket,
                                       const std::string& bytes);

}  // namespace fencegate::pgport

#endif  // PGPORT_FRAME_READER_H_
