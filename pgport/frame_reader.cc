// Copyright fencegate authors.

#include "pgport/frame_reader.h"

#include "absl/strings/str_cat.h"

namespace fencegate::pgport {

absl::StatusOr<std::optional<pgwire::Frame>> FrameReader::Split(bool startup) {
  const absl::string_view rest = absl::string_view(buffer_).substr(consumed_);
  absl::StatusOr<std::optional<pgwire::Frame>> frame =
      startup ? pgwire::NextStartupFrame(rest)
              : pgwire::NextFrame(rest, max_message_bytes_);
  if (frame.ok() && frame->has_value()) consumed_ += (*frame)->size;
  return frame;
}

absl::StatusOr<std::optional<pgwire::Frame>> FrameReader::Buffered() {
  return Split(/*startup=*/false);
}

void FrameReader::Compact() {
  buffer_.erase(0, consumed_);
  consumed_ = 0;
  if (buffer_.capacity() > 2 * kUnreservedBytes &&
      buffer_.size() <= kUnreservedBytes) {
    std::string(buffer_).swap(
        buffer_);  // gives the large message's memory back
    held_ = MemoryBudget::Reservation();
    held_bytes_ = 0;
  }
}

absl::Status FrameReader::Reserve(bool startup) {
  const absl::string_view rest = absl::string_view(buffer_).substr(consumed_);
  // Startup packets are small (pgwire/frame.h bounds them).
  if (memory_ == nullptr || startup || rest.size() < pgwire::kHeaderBytes) {
    return absl::OkStatus();
  }
  const auto* p = reinterpret_cast<const unsigned char*>(rest.data()) + 1;
  const size_t size = 1 + ((size_t{p[0]} << 24) | (size_t{p[1]} << 16) |
                           (size_t{p[2]} << 8) | size_t{p[3]});
  if (size <= kUnreservedBytes || size <= held_bytes_) return absl::OkStatus();
  // Split() refused a message past the limit already; this one fits it.
  absl::StatusOr<MemoryBudget::Reservation> reserved = memory_->Reserve(size);
  if (!reserved.ok()) {
    out_of_memory_ = true;
    return reserved.status();
  }
  held_ = *std::move(reserved);
  held_bytes_ = size;
  return absl::OkStatus();
}

asio::mutable_buffer FrameReader::Grow() {
  const size_t had = buffer_.size();
  buffer_.resize(had + kReadBytes);
  return asio::buffer(buffer_.data() + had, kReadBytes);
}

absl::Status FrameReader::Filled(size_t n,
                                 const boost::system::error_code& ec) {
  buffer_.resize(buffer_.size() - kReadBytes + n);
  if (!ec) return absl::OkStatus();
  return absl::UnavailableError(
      ec == asio::error::eof ? std::string("the peer closed the connection")
                             : absl::StrCat("read failed: ", ec.message()));
}

asio::awaitable<absl::Status> WriteAll(tcp::socket& socket,
                                       const std::string& bytes) {
  boost::system::error_code ec;
  co_await asio::async_write(socket, asio::buffer(bytes),
                             asio::redirect_error(asio::use_awaitable, ec));
  if (ec)
    co_return absl::UnavailableError(
        absl::StrCat("write failed: ", ec.message()));
  co_return absl::OkStatus();
}

}  // namespace fencegate::pgport
