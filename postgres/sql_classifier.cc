// Copyright fencegate authors.

#include "postgres/sql_classifier.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "postgres/sql_parse.h"

namespace fencegate::postgres {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

constexpr char kAllowed[] =
    "an operation is one INSERT, UPDATE, DELETE, MERGE or SELECT (without "
    "INTO)";

Verdict Refused(std::string statement, std::string reason) {
  return Verdict{
      StatementClass::kRefused, std::move(statement), std::move(reason), 0, {}};
}

// "create_table_as_stmt" -> "CREATE TABLE AS".
std::string KindFromFieldName(const std::string& field) {
  std::string name = field;
  if (absl::EndsWith(name, "_stmt")) name.resize(name.size() - 5);
  absl::AsciiStrToUpper(&name);
  return absl::StrReplaceAll(name, {{"_", " "}});
}

// The SQL name of a top-level statement that is not DML.
std::string UtilityKind(const pg_query::Node& node) {
  switch (node.node_case()) {
    case pg_query::Node::kVariableSetStmt: {
      const pg_query::VariableSetStmt& set = node.variable_set_stmt();
      const bool reset = set.kind() == pg_query::VAR_RESET ||
                         set.kind() == pg_query::VAR_RESET_ALL;
      if (reset) return "RESET";
      return set.is_local() ? "SET LOCAL" : "SET";
    }
    case pg_query::Node::kVariableShowStmt:
      return "SHOW";
    case pg_query::Node::kCreateStmt:
      return "CREATE TABLE";
    case pg_query::Node::kIndexStmt:
      return "CREATE INDEX";
    case pg_query::Node::kViewStmt:
      return "CREATE VIEW";
    case pg_query::Node::kCreateFunctionStmt:
      return "CREATE FUNCTION";
    case pg_query::Node::kDeclareCursorStmt:
      return "DECLARE";
    case pg_query::Node::kClosePortalStmt:
      return "CLOSE";
    case pg_query::Node::kVacuumStmt:
      return "VACUUM or ANALYZE";
    case pg_query::Node::kRenameStmt:
      return "ALTER ... RENAME";
    case pg_query::Node::kGrantStmt:
      return "GRANT or REVOKE";
    case pg_query::Node::kAlterRoleSetStmt:
      return "ALTER ROLE ... SET";
    case pg_query::Node::kAlterDatabaseSetStmt:
      return "ALTER DATABASE ... SET";
    default:
      break;
  }
  const FieldDescriptor* field =
      pg_query::Node::descriptor()->FindFieldByNumber(node.node_case());
  return field == nullptr ? std::string("an unknown statement")
                          : KindFromFieldName(field->name());
}

// "TRANS_STMT_ROLLBACK_TO" -> "ROLLBACK TO".
std::string TransactionKind(const pg_query::TransactionStmt& stmt) {
  std::string name = pg_query::TransactionStmtKind_Name(stmt.kind());
  constexpr absl::string_view kPrefix = "TRANS_STMT_";
  if (absl::StartsWith(name, kPrefix)) name.erase(0, kPrefix.size());
  return absl::StrReplaceAll(name, {{"_", " "}});
}

bool IsSessionStateFunction(const std::string& name) {
  for (const std::string& prefix : SessionStateFunctionPrefixes()) {
    if (absl::StartsWith(name, prefix)) return true;
  }
  const std::vector<std::string>& names = SessionStateFunctions();
  return std::find(names.begin(), names.end(), name) != names.end();
}

// What a walk of a parse tree finds.
struct TreeFacts {
  // Why the statement reaches session state; empty if nothing does.
  std::string session_use;
  // The highest $n it refers to.
  int params = 0;
  Callees callees;
};

// Adds `name` to `names` unless `seen` has it.
void AddOnce(const std::string& name, absl::flat_hash_set<std::string>* seen,
             std::vector<std::string>* names) {
  if (!name.empty() && seen->insert(name).second) names->push_back(name);
}

// True if a name list (schema.name, catalog.schema.name) names a schema
// other than pg_catalog.
template <typename Names>
bool QualifiedOutsideCatalog(const Names& names) {
  if (names.size() < 2) return false;
  const auto& schema = names[names.size() - 2];
  return !schema.has_string() || schema.string().sval() != "pg_catalog";
}

// The last part of an operator's or function's name list.
template <typename Names>
const std::string& LastName(const Names& names) {
  static const auto* const kNone = new std::string;
  if (names.empty() || !names.rbegin()->has_string()) return *kNone;
  return names.rbegin()->string().sval();
}

// Walks every message of the tree under `root`, without recursion.
TreeFacts WalkTree(const Message& root) {
  TreeFacts facts;
  const Descriptor* func_call = pg_query::FuncCall::descriptor();
  const Descriptor* range_var = pg_query::RangeVar::descriptor();
  const Descriptor* into = pg_query::IntoClause::descriptor();
  const Descriptor* param_ref = pg_query::ParamRef::descriptor();
  const Descriptor* column_ref = pg_query::ColumnRef::descriptor();
  const Descriptor* indirection = pg_query::A_Indirection::descriptor();
  const Descriptor* a_expr = pg_query::A_Expr::descriptor();
  const Descriptor* sub_link = pg_query::SubLink::descriptor();
  const Descriptor* sort_by = pg_query::SortBy::descriptor();
  const Descriptor* case_expr = pg_query::CaseExpr::descriptor();
  const Descriptor* min_max = pg_query::MinMaxExpr::descriptor();
  const Descriptor* join = pg_query::JoinExpr::descriptor();
  const Descriptor* select = pg_query::SelectStmt::descriptor();
  const Descriptor* window = pg_query::WindowDef::descriptor();
  absl::flat_hash_set<std::string> seen_functions, seen_fields, seen_operators;
  auto add_operator = [&](const auto& names) {
    if (names.empty()) return;
    AddOnce(LastName(names), &seen_operators, &facts.callees.operators);
    if (QualifiedOutsideCatalog(names)) facts.callees.qualified = true;
  };
  auto found = [&facts](std::string why) {
    if (facts.session_use.empty()) facts.session_use = std::move(why);
  };
  auto calls = [](const std::string& name) {
    return absl::StrCat("calls ", name,
                        "(), which reaches the session's state or runs SQL "
                        "text of its own");
  };
  // PostgreSQL reads x.f, where x has no column f, as the call f(x)
  // ("functional notation"): a name after the first of a column reference,
  // or a field selected from an expression, may be a call.
  auto check_field_names = [&](const auto& names, int from) {
    for (int i = from; i < names.size(); ++i) {
      if (!names[i].has_string()) continue;
      const std::string& name = names[i].string().sval();
      if (IsSessionStateFunction(name)) found(calls(name));
      AddOnce(name, &seen_fields, &facts.callees.fields);
    }
  };
  ForEachNode(root, [&](const Message& node) {
    const Message* m = &node;
    const Descriptor* type = m->GetDescriptor();
    if (type == param_ref) {
      facts.params = std::max(
          facts.params, static_cast<const pg_query::ParamRef&>(*m).number());
    } else if (type == func_call) {
      const auto& call = static_cast<const pg_query::FuncCall&>(*m);
      const std::string& name = CalledName(call);
      if (!name.empty() && IsSessionStateFunction(name)) found(calls(name));
      AddOnce(name, &seen_functions, &facts.callees.functions);
      if (QualifiedOutsideCatalog(call.funcname())) {
        facts.callees.qualified = true;
      }
      // The fence table's own functions (fence_schema.h), whatever schema
      // names them: only the gateway calls them. None takes one
      // argument, so the functional notation cannot call them.
      if (name == "fence_next" || name == "fence_seq" || name == "fences") {
        found(absl::StrCat("calls ", name,
                           "(), which only the gateway may call"));
      }
    } else if (type == a_expr) {
      const auto& expr = static_cast<const pg_query::A_Expr&>(*m);
      switch (expr.kind()) {
        case pg_query::AEXPR_BETWEEN:
        case pg_query::AEXPR_NOT_BETWEEN:
        case pg_query::AEXPR_BETWEEN_SYM:
        case pg_query::AEXPR_NOT_BETWEEN_SYM:
          // Named "BETWEEN"; PostgreSQL calls >= and <= (or < and >).
          for (const char* op : {">=", "<=", "<", ">"}) {
            AddOnce(op, &seen_operators, &facts.callees.operators);
          }
          break;
        default:
          add_operator(expr.name());
      }
    } else if (type == sub_link) {
      add_operator(static_cast<const pg_query::SubLink&>(*m).oper_name());
    } else if (type == sort_by) {
      const auto& sort = static_cast<const pg_query::SortBy&>(*m);
      if (sort.use_op().empty()) {
        facts.callees.implicit_operators = true;
      } else {
        add_operator(sort.use_op());
      }
    } else if (type == case_expr) {
      if (static_cast<const pg_query::CaseExpr&>(*m).has_arg()) {
        facts.callees.implicit_operators = true;
      }
    } else if (type == min_max || type == window) {
      facts.callees.implicit_operators = true;
    } else if (type == join) {
      const auto& j = static_cast<const pg_query::JoinExpr&>(*m);
      if (j.is_natural() || !j.using_clause().empty()) {
        facts.callees.implicit_operators = true;
      }
    } else if (type == select) {
      const auto& sel = static_cast<const pg_query::SelectStmt&>(*m);
      if (!sel.distinct_clause().empty() || !sel.group_clause().empty() ||
          (sel.op() != pg_query::SETOP_NONE &&
           sel.op() != pg_query::SET_OPERATION_UNDEFINED && !sel.all())) {
        facts.callees.implicit_operators = true;
      }
    } else if (type == column_ref) {
      check_field_names(static_cast<const pg_query::ColumnRef&>(*m).fields(),
                        1);
    } else if (type == indirection) {
      check_field_names(
          static_cast<const pg_query::A_Indirection&>(*m).indirection(), 0);
    } else if (type == range_var) {
      const std::string& name =
          static_cast<const pg_query::RangeVar&>(*m).relname();
      const std::vector<std::string>& names = SessionStateRelations();
      if (std::find(names.begin(), names.end(), name) != names.end()) {
        found(absl::StrCat("uses ", name,
                           ", which reads or changes the session's settings"));
      }
    } else if (type == into) {
      found("SELECT INTO creates a table; use INSERT ... SELECT");
    }
  });
  return facts;
}

Verdict ClassifyTree(const pg_query::ParseResult& tree) {
  if (tree.stmts_size() == 0) {
    return Refused("", "holds no statement (only spaces or comments)");
  }
  if (tree.stmts_size() > 1) {
    return Refused("", absl::StrCat("holds ", tree.stmts_size(),
                                    " statements; send each as an operation "
                                    "of its own (",
                                    kAllowed, ")"));
  }
  const pg_query::Node& node = tree.stmts(0).stmt();
  std::string statement;
  switch (node.node_case()) {
    case pg_query::Node::kInsertStmt:
      statement = "INSERT";
      break;
    case pg_query::Node::kUpdateStmt:
      statement = "UPDATE";
      break;
    case pg_query::Node::kDeleteStmt:
      statement = "DELETE";
      break;
    case pg_query::Node::kMergeStmt:
      statement = "MERGE";
      break;
    case pg_query::Node::kSelectStmt:
      statement = "SELECT";
      break;
    case pg_query::Node::kDoStmt:
      return Verdict{StatementClass::kDirty, "DO", "", 0, {}};
    case pg_query::Node::kCallStmt: {
      TreeFacts facts = WalkTree(node);
      return Verdict{StatementClass::kDirty, "CALL", "", facts.params,
                     std::move(facts.callees)};
    }
    case pg_query::Node::kTransactionStmt: {
      std::string kind =
          absl::StrCat("transaction control (",
                       TransactionKind(node.transaction_stmt()), ")");
      return Refused(kind, absl::StrCat(kind,
                                        " is not allowed: each Write is one "
                                        "transaction"));
    }
    default: {
      std::string kind = UtilityKind(node);
      Verdict refused =
          Refused(kind, absl::StrCat(kind, " is not allowed: ", kAllowed));
      refused.params = WalkTree(node).params;  // For named statements.
      return refused;
    }
  }
  TreeFacts facts = WalkTree(node);
  if (!facts.session_use.empty()) {
    Verdict refused = absl::StartsWith(facts.session_use, "SELECT INTO")
                          ? Refused("SELECT INTO", std::move(facts.session_use))
                          : Refused(statement, absl::StrCat(statement, " ",
                                                            facts.session_use));
    refused.params = facts.params;
    return refused;
  }
  return Verdict{StatementClass::kSafe, std::move(statement), "", facts.params,
                 std::move(facts.callees)};
}

}  // namespace

const std::vector<std::string>& SessionStateRelations() {
  static const auto* const kNames = new std::vector<std::string>{"pg_settings"};
  return *kNames;
}

Verdict ClassifyStatement(absl::string_view sql) {
  absl::StatusOr<pg_query::ParseResult> tree = ParseSql(sql);
  if (!tree.ok()) return Refused("", std::string(tree.status().message()));
  Verdict verdict = ClassifyTree(*tree);
  Flatten(*tree);
  return verdict;
}

SqlClassifier::SqlClassifier(Options options) : options_(options) {}

bool SqlClassifier::Lookup(absl::string_view sql,
                           const std::function<bool(const Answers&)>& read) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(sql);
  if (it != index_.end() && read(it->second->second)) {
    ++hits_;
    lru_.splice(lru_.begin(), lru_, it->second);
    return true;
  }
  ++misses_;
  return false;
}

void SqlClassifier::Keep(absl::string_view sql,
                         const std::function<void(Answers&)>& fill) {
  if (sql.size() > options_.max_bytes / 4 || options_.max_entries == 0) return;
  absl::MutexLock lock(&mu_);
  auto it = index_.find(sql);
  if (it != index_.end()) {
    fill(it->second->second);  // The other door's text, or another thread's.
    return;
  }
  lru_.emplace_front(std::string(sql), Answers{});
  fill(lru_.front().second);
  index_.emplace(lru_.front().first, lru_.begin());
  bytes_ += sql.size();
  while (index_.size() > options_.max_entries || bytes_ > options_.max_bytes) {
    const Entry& oldest = lru_.back();
    bytes_ -= oldest.first.size();
    index_.erase(oldest.first);
    lru_.pop_back();
  }
}

Verdict SqlClassifier::Classify(absl::string_view sql, bool* hit) {
  Verdict verdict;
  const bool found = Lookup(sql, [&](const Answers& a) {
    if (!a.statement.has_value()) return false;
    verdict = *a.statement;
    return true;
  });
  if (hit != nullptr) *hit = found;
  if (found) return verdict;
  verdict = ClassifyStatement(sql);
  Keep(sql, [&](Answers& a) { a.statement = verdict; });
  return verdict;
}

absl::StatusOr<std::vector<SessionStatement>> SqlClassifier::ClassifySession(
    absl::string_view sql) {
  SessionAnswer answer;
  if (!Lookup(sql, [&](const Answers& a) {
        if (!a.session.has_value()) return false;
        answer = *a.session;
        return true;
      })) {
    absl::StatusOr<std::vector<SessionStatement>> parsed =
        ClassifySessionSql(sql);
    if (!parsed.ok()) {
      answer.error = parsed.status();
    } else {
      for (SessionStatement& statement : *parsed) {
        answer.spans.emplace_back(
            static_cast<size_t>(statement.text.data() - sql.data()),
            statement.text.size());
        statement.text = {};
        answer.statements.push_back(std::move(statement));
      }
    }
    Keep(sql, [&](Answers& a) { a.session = answer; });
  }
  if (!answer.error.ok()) return answer.error;
  for (size_t i = 0; i < answer.statements.size(); ++i) {
    answer.statements[i].text =
        sql.substr(answer.spans[i].first, answer.spans[i].second);
  }
  return std::move(answer.statements);
}

SqlClassifier::Counts SqlClassifier::counts() const {
  absl::MutexLock lock(&mu_);
  return Counts{index_.size(), bytes_, hits_, misses_};
}

}  // namespace fencegate::postgres
