// Copyright fencegate authors.
//
// Reading a file of one JSON object per line (the gateway's log, the audit
// log) while its writer may still be appending.

#ifndef TESTS_JSON_LINES_H_
#define TESTS_JSON_LINES_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace fencegate::testing {

// Each whole line of `text` parsed as one `Message`; a line that is not one
// fails the test. What follows the last newline is left out: the writer may
// be part-way through it.
template <typename Message>
std::vector<Message> ParseJsonLines(absl::string_view text) {
  std::vector<Message> messages;
  text = text.substr(0, text.rfind('\n') + 1);
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty()) continue;
    Message message;
    EXPECT_TRUE(
        google::protobuf::util::JsonStringToMessage(std::string(line), &message)
            .ok())
        << "not one JSON object: " << line;
    messages.push_back(std::move(message));
  }
  return messages;
}

}  // namespace fencegate::testing

#endif  // TESTS_JSON_LINES_H_
