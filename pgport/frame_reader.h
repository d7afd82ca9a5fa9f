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
#include <type_traits>

#include "absl/status/statusor.h"
#include "fencegate/common/memory_budget.h"
#include "pgport/asio.h"
#include "pgwire/frame.h"

namespace fencegate::pgport {

class FrameReader {
 public:
  // Messages past `max_message_bytes` (header included) are refused. With
  // `memory` (not owned; outlives the reader), a message larger than
  // kUnreservedBytes is reserved there before it is read, and released
  // once the next one is asked for; one that does not fit is refused
  // (RESOURCE_EXHAUSTED, and out_of_memory() says so).
  explicit FrameReader(size_t max_message_bytes, MemoryBudget* memory = nullptr)
      : max_message_bytes_(max_message_bytes), memory_(memory) {}

  // What a reader holds without a reservation: its reads' room and a
  // message of up to this size.
  static constexpr size_t kUnreservedBytes = 64 << 10;

  // The next message, reading from `stream` (a tcp::socket, or a
  // ClientStream) as needed. The frame points into the reader and is valid
  // until its next call. `startup`: a startup-phase packet (no type byte).
  // UNAVAILABLE when the peer closed or the read failed; INVALID_ARGUMENT
  // or RESOURCE_EXHAUSTED (pgwire's) for a message that cannot be framed.
  template <typename Stream>
  asio::awaitable<absl::StatusOr<pgwire::Frame>> Next(Stream& stream,
                                                      bool startup = false) {
    Compact();
    for (;;) {
      absl::StatusOr<std::optional<pgwire::Frame>> frame = Split(startup);
      if (!frame.ok()) co_return frame.status();
      if (frame->has_value()) co_return **frame;
      if (absl::Status s = Reserve(startup); !s.ok()) co_return s;
      const asio::mutable_buffer room = Grow();
      boost::system::error_code ec;
      size_t n = 0;
      if constexpr (std::is_same_v<Stream, tcp::socket>) {
        n = co_await stream.async_read_some(
            room, asio::redirect_error(asio::use_awaitable, ec));
      } else {
        n = co_await stream.ReadSome(room, ec);
      }
      if (absl::Status s = Filled(n, ec); !s.ok()) co_return s;
    }
  }

  // A whole message already read, without reading; nullopt if none.
  absl::StatusOr<std::optional<pgwire::Frame>> Buffered();

  // Bytes read and not yet handed out.
  size_t pending_bytes() const { return buffer_.size() - consumed_; }
  // The last error was the memory budget's refusal.
  bool out_of_memory() const { return out_of_memory_; }

 private:
  absl::StatusOr<std::optional<pgwire::Frame>> Split(bool startup);
  // Drops what was handed out before (no longer referenced), and the
  // memory and reservation of a large message.
  void Compact();
  // Before reading more of a message larger than kUnreservedBytes: its
  // size reserved.
  absl::Status Reserve(bool startup);
  // Room at the end of the buffer for a read.
  asio::mutable_buffer Grow();
  // After a read of `n` bytes into Grow()'s room, or its error.
  absl::Status Filled(size_t n, const boost::system::error_code& ec);

  static constexpr size_t kReadBytes = 16384;

  const size_t max_message_bytes_;
  MemoryBudget* const memory_;
  MemoryBudget::Reservation held_;
  size_t held_bytes_ = 0;
  bool out_of_memory_ = false;
  std::string buffer_;
  // Bytes of buffer_ handed out already.
  size_t consumed_ = 0;
};

// Writes all of `bytes`; UNAVAILABLE if the write failed.
asio::awaitable<absl::Status> WriteAll(tcp::socket& socket,
                                       const std::string& bytes);

}  // namespace fencegate::pgport

#endif  // PGPORT_FRAME_READER_H_
