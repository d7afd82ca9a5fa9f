// Copyright fencegate authors.

#include "postgres/sql_parse.h"

#include <pg_query.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"

namespace fencegate::postgres {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

absl::StatusOr<pg_query::ParseResult> ParseSql(absl::string_view sql) {
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
      result = absl::InvalidArgumentError(
          absl::StrCat("nests deeper than ", kMaxSqlTreeDepth, " levels"));
    } else {
      result = std::move(tree);
    }
  }
  pg_query_free_protobuf_parse_result(parsed);
  return result;
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

const std::string& CalledName(const pg_query::FuncCall& call) {
  static const auto* const kNone = new std::string;
  if (call.funcname().empty() || !call.funcname().rbegin()->has_string()) {
    return *kNone;
  }
  return call.funcname().rbegin()->string().sval();
}

}  // namespace fencegate::postgres
