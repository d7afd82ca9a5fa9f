// Copyright fencegate authors.

#include "postgres/session_sql.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "postgres/sql_parse.h"

namespace fencegate::postgres {
namespace {

constexpr absl::string_view kGatewayPrefix = "fencegate.";

// Whether the options of a BEGIN, SET TRANSACTION or SET SESSION
// CHARACTERISTICS ask for READ WRITE (the grammar writes it as
// transaction_read_only = 0).
bool AsksReadWrite(
    const google::protobuf::RepeatedPtrField<pg_query::Node>& options) {
  for (const pg_query::Node& option : options) {
    if (!option.has_def_elem()) continue;
    const pg_query::DefElem& d = option.def_elem();
    if (d.defname() == "transaction_read_only" && d.arg().has_a_const() &&
        d.arg().a_const().has_ival() && d.arg().a_const().ival().ival() == 0) {
      return true;
    }
  }
  return false;
}

// The text of a constant, or nullopt for anything else.
std::optional<std::string> ConstantText(const pg_query::Node& node) {
  if (!node.has_a_const()) return std::nullopt;
  const pg_query::A_Const& c = node.a_const();
  if (c.has_ival()) return absl::StrCat(c.ival().ival());
  if (c.has_fval()) return c.fval().fval();
  if (c.has_sval()) return c.sval().sval();
  return std::nullopt;
}

void ClassifyTransaction(const pg_query::TransactionStmt& t,
                         SessionStatement& out) {
  switch (t.kind()) {
    case pg_query::TRANS_STMT_BEGIN:
    case pg_query::TRANS_STMT_START:
      out.effect = SessionEffect::kBegin;
      out.read_write = AsksReadWrite(t.options());
      out.lifts_read_only = out.read_write;
      return;
    case pg_query::TRANS_STMT_COMMIT:
      out.effect = SessionEffect::kCommit;
      out.chain = t.chain();
      return;
    case pg_query::TRANS_STMT_ROLLBACK:
      out.effect = SessionEffect::kRollback;
      out.chain = t.chain();
      return;
    case pg_query::TRANS_STMT_PREPARE:
    case pg_query::TRANS_STMT_COMMIT_PREPARED:
    case pg_query::TRANS_STMT_ROLLBACK_PREPARED:
      out.effect = SessionEffect::kRefused;
      out.reason =
          "two-phase commit is not served: a prepared transaction commits "
          "after its session's fence check, from any session";
      return;
    default:  // SAVEPOINT, RELEASE, ROLLBACK TO: inside a transaction.
      return;
  }
}

// Why a SET of `name` (lower case) is refused, if it is: a pinned setting
// set to anything but its pinned value. RESET and DEFAULT restore the
// value the port's connection started with, which is the pinned one.
std::optional<std::string> PinRefusal(const pg_query::VariableSetStmt& set,
                                      const std::string& name) {
  if (!IsPinnedSetting(name)) return std::nullopt;
  switch (set.kind()) {
    case pg_query::VAR_SET_DEFAULT:
    case pg_query::VAR_RESET:
      return std::nullopt;
    case pg_query::VAR_SET_VALUE:
      if (std::optional<std::string> value =
              set.args_size() == 1 ? ConstantText(set.args(0)) : std::nullopt;
          value.has_value() && KeepsPin(name, *value)) {
        return std::nullopt;
      }
      break;
    default:
      break;
  }
  return PinnedReason(name);
}

void ClassifySet(const pg_query::VariableSetStmt& set, SessionStatement& out) {
  const std::string name = absl::AsciiStrToLower(set.name());
  if (absl::StartsWith(name, kGatewayPrefix)) {
    out.setting = name.substr(kGatewayPrefix.size());
    out.effect = SessionEffect::kRefused;
    if (out.setting != "domain" && out.setting != "token") {
      out.reason = absl::StrCat("unknown setting ", set.name(),
                                ": the gateway's are fencegate.domain and "
                                "fencegate.token");
    } else if (set.kind() != pg_query::VAR_SET_VALUE || set.is_local()) {
      out.reason = absl::StrCat(
          set.name(), " is set with SET ", set.name(),
          " = value; SET LOCAL, RESET and DEFAULT do not apply to it");
    } else if (std::optional<std::string> value =
                   set.args_size() == 1 ? ConstantText(set.args(0))
                                        : std::nullopt;
               !value.has_value()) {
      out.reason = absl::StrCat(set.name(), " takes one constant value");
    } else {
      out.effect = SessionEffect::kGatewaySet;
      out.value = *std::move(value);
    }
    return;
  }
  if (std::optional<std::string> refusal = PinRefusal(set, name);
      refusal.has_value()) {
    out.effect = SessionEffect::kRefused;
    out.reason = *std::move(refusal);
    return;
  }
  out.lifts_read_only =
      set.kind() == pg_query::VAR_RESET_ALL || IsReadOnlySetting(name) ||
      ((name == "transaction" || name == "session characteristics") &&
       AsksReadWrite(set.args()));
}

// Prepared statements named fencegate_* are the gateway's own.
void RefuseGatewayName(const std::string& name, SessionStatement& out) {
  if (absl::StartsWith(absl::AsciiStrToLower(name), kReservedNamePrefix)) {
    out.effect = SessionEffect::kRefused;
    out.reason = absl::StrCat("the prepared statement name \"", name,
                              "\" is reserved: names starting with "
                              "fencegate_ are the gateway's");
  }
}

// Functions that run SQL text of their own, or write large objects, which
// a read-only transaction would let them do or which the parser cannot see
// into: a session without a token is refused them.
bool RunsTextOrWritesObjects(const std::string& name) {
  static const auto* const kNames = new std::vector<std::string>{
      "query_to_xml",        "query_to_xml_and_xmlschema",
      "query_to_xmlschema",  "cursor_to_xml",
      "cursor_to_xmlschema", "ts_stat",
      "ts_rewrite",          "xpath_table",
      "connectby",           "lowrite"};
  for (const std::string& n : *kNames) {
    if (name == n) return true;
  }
  return absl::StartsWith(name, "lo_") || absl::StartsWith(name, "dblink") ||
         absl::StartsWith(name, "crosstab");
}

// What the function calls anywhere in `stmt` (a PREPARE's query, a
// subquery, an EXPLAIN's statement) do to `out`: set_config() and the
// functions above lift the read-only mode; set_config() of a pinned
// setting, or of a name that is not one constant, and the calls that
// signal another backend are refused.
void ClassifyCalls(const pg_query::Node& stmt, SessionStatement& out) {
  const google::protobuf::Descriptor* func_call =
      pg_query::FuncCall::descriptor();
  ForEachNode(stmt, [&](const google::protobuf::Message& m) {
    if (m.GetDescriptor() != func_call ||
        out.effect == SessionEffect::kRefused) {
      return;
    }
    const auto& call = static_cast<const pg_query::FuncCall&>(m);
    const std::string name = absl::AsciiStrToLower(CalledName(call));
    if (absl::StartsWith(name, "pg_") && absl::StrContains(name, "advisory_")) {
      out.effect = SessionEffect::kRefused;
      out.reason = absl::StrCat(
          name,
          "() is not served through the gateway: advisory locks are how the "
          "session's server connection holds its fence");
      return;
    }
    if (name == "pg_cancel_backend" || name == "pg_terminate_backend") {
      out.effect = SessionEffect::kRefused;
      out.reason =
          absl::StrCat(name,
                       "() is not served through the gateway: it reaches other "
                       "sessions' backends");
      return;
    }
    if (name == "set_config") {
      out.lifts_read_only = true;
      std::optional<std::string> setting =
          call.args_size() > 0 ? ConstantText(call.args(0)) : std::nullopt;
      if (!setting.has_value()) {
        out.effect = SessionEffect::kRefused;
        out.reason =
            "set_config() is served only with one constant setting name";
      } else if (IsPinnedSetting(absl::AsciiStrToLower(*setting))) {
        out.effect = SessionEffect::kRefused;
        out.reason = PinnedReason(absl::AsciiStrToLower(*setting));
      }
      return;
    }
    if (RunsTextOrWritesObjects(name)) out.lifts_read_only = true;
  });
}

SessionStatement Classify(const pg_query::Node& stmt) {
  SessionStatement out;
  switch (stmt.node_case()) {
    case pg_query::Node::kTransactionStmt:
      ClassifyTransaction(stmt.transaction_stmt(), out);
      break;
    case pg_query::Node::kVariableSetStmt:
      ClassifySet(stmt.variable_set_stmt(), out);
      break;
    case pg_query::Node::kVariableShowStmt: {
      const std::string name =
          absl::AsciiStrToLower(stmt.variable_show_stmt().name());
      if (absl::StartsWith(name, kGatewayPrefix)) {
        out.setting = name.substr(kGatewayPrefix.size());
        if (out.setting == "domain" || out.setting == "token") {
          out.effect = SessionEffect::kGatewayShow;
        } else {
          out.effect = SessionEffect::kRefused;
          out.reason = absl::StrCat("unknown setting ",
                                    stmt.variable_show_stmt().name());
        }
      }
      break;
    }
    case pg_query::Node::kDiscardStmt:
      if (stmt.discard_stmt().target() == pg_query::DISCARD_ALL) {
        // It would release the fence the server connection holds
        // (fence_hold.h); the gateway resets the session at its end.
        out.effect = SessionEffect::kRefused;
        out.reason =
            "DISCARD ALL is not served through the gateway: it would release "
            "the fence the session's server connection holds; the gateway "
            "resets the connection when the session ends";
      }
      break;
    case pg_query::Node::kDeallocateStmt:
      RefuseGatewayName(stmt.deallocate_stmt().name(), out);
      break;
    case pg_query::Node::kPrepareStmt:
      RefuseGatewayName(stmt.prepare_stmt().name(), out);
      break;
    case pg_query::Node::kDoStmt:
    case pg_query::Node::kCallStmt:
      out.lifts_read_only = true;
      break;
    case pg_query::Node::kLockStmt:
      // Above ACCESS SHARE (1) a lock holds writers out.
      out.lifts_read_only = stmt.lock_stmt().mode() > 1;
      break;
    default:
      break;
  }
  if (out.effect != SessionEffect::kRefused) ClassifyCalls(stmt, out);
  return out;
}

}  // namespace

bool IsReadOnlySetting(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  return lower == "default_transaction_read_only" ||
         lower == "transaction_read_only";
}

bool IsPinnedSetting(absl::string_view name) {
  return name == "client_encoding" || name == "standard_conforming_strings";
}

bool KeepsPin(absl::string_view name, absl::string_view value) {
  std::string v = absl::AsciiStrToLower(value);
  if (name == "client_encoding") {
    v.erase(std::remove_if(v.begin(), v.end(),
                           [](char c) { return c == '-' || c == '_'; }),
            v.end());
    return v == "utf8" || v == "unicode";
  }
  if (name == "standard_conforming_strings") {
    return v == "on" || v == "true" || v == "yes" || v == "1";
  }
  return true;
}

std::string PinnedReason(absl::string_view name) {
  return name == "client_encoding"
             ? std::string(
                   "client_encoding stays UTF8 through the gateway: it reads "
                   "SQL text as UTF8, as the server must")
             : std::string(
                   "standard_conforming_strings stays on through the "
                   "gateway: it reads string literals as the server does "
                   "with it on");
}

absl::StatusOr<std::vector<SessionStatement>> ClassifySessionSql(
    absl::string_view sql) {
  absl::StatusOr<pg_query::ParseResult> tree = ParseSql(sql);
  if (!tree.ok()) return tree.status();
  std::vector<SessionStatement> out;
  for (const pg_query::RawStmt& raw : tree->stmts()) {
    SessionStatement s = Classify(raw.stmt());
    const auto begin = static_cast<size_t>(raw.stmt_location());
    s.text = raw.stmt_len() == 0
                 ? sql.substr(begin)
                 : sql.substr(begin, static_cast<size_t>(raw.stmt_len()));
    out.push_back(std::move(s));
  }
  Flatten(*tree);
  return out;
}

}  // namespace fencegate::postgres
