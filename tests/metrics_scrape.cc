// Copyright fencegate authors.

#include "tests/metrics_scrape.h"

#include <exception>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "boost/asio/connect.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"

namespace fencegate::testing {

namespace http = boost::beast::http;

absl::StatusOr<std::string> HttpGet(int port, const std::string& target) {
  try {
    boost::asio::io_context io;
    boost::asio::ip::tcp::socket socket(io);
    socket.connect(boost::asio::ip::tcp::endpoint(
        boost::asio::ip::make_address("127.0.0.1"),
        static_cast<unsigned short>(port)));
    http::request<http::empty_body> request{http::verb::get, target, 11};
    request.set(http::field::host, "127.0.0.1");
    http::write(socket, request);
    boost::beast::flat_buffer buffer;
    http::response<http::string_body> response;
    http::read(socket, buffer, response);
    if (response.result() != http::status::ok) {
      return absl::UnavailableError(
          absl::StrCat("GET ", target, ": HTTP ", response.result_int()));
    }
    return response.body();
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("GET ", target, ": ", e.what()));
  }
}

double SampleValue(const std::string& exposition, const std::string& name,
                   const std::map<std::string, std::string>& labels) {
  double sum = 0;
  bool found = false;
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == absl::string_view::npos) continue;
    absl::string_view series = line.substr(0, space);
    std::map<std::string, std::string> have;
    const size_t brace = series.find('{');
    if (series.substr(0, brace) != name) continue;
    if (brace != absl::string_view::npos) {
      absl::string_view inner = series.substr(brace + 1);
      absl::ConsumeSuffix(&inner, "}");
      for (absl::string_view pair : absl::StrSplit(inner, ',')) {
        std::pair<std::string, std::string> kv =
            absl::StrSplit(pair, absl::MaxSplits('=', 1));
        absl::string_view value = kv.second;
        absl::ConsumePrefix(&value, "\"");
        absl::ConsumeSuffix(&value, "\"");
        have[kv.first] = std::string(value);
      }
    }
    bool match = true;
    for (const auto& [key, value] : labels) {
      auto it = have.find(key);
      if (it == have.end() || it->second != value) match = false;
    }
    double v = 0;
    if (match && absl::SimpleAtod(line.substr(space + 1), &v)) {
      sum += v;
      found = true;
    }
  }
  return found ? sum : -1;
}

}  // namespace fencegate::testing
