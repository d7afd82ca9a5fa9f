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
