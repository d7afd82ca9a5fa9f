// Copyright fencegate authors.
//
// The parts of Boost.Asio the PostgreSQL port is written with: C++20
// coroutines (awaitable, co_spawn) over TCP sockets. Boost 1.74 detects
// coroutine support only for GCC; clang 14 has it too, with libstdc++'s
// <coroutine>, and pgport/CMakeLists.txt says so for clang.

#ifndef PGPORT_ASIO_H_
#define PGPORT_ASIO_H_

#include <utility>  // Boost 1.74's awaitable.hpp uses std::exchange.

#include "boost/asio/awaitable.hpp"
#include "boost/asio/co_spawn.hpp"
#include "boost/asio/connect.hpp"
#include "boost/asio/detached.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/read.hpp"
#include "boost/asio/redirect_error.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/this_coro.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "boost/asio/write.hpp"

namespace fencegate::pgport {

namespace asio = boost::asio;
using tcp = boost::asio::ip::tcp;

}  // namespace fencegate::pgport

#endif  // PGPORT_ASIO_H_
