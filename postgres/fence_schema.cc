// Copyright fencegate authors.

#include "postgres/fence_schema.h"

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "postgres/admin_transaction.h"
#include "postgres/fence_hold.h"
#include "pqxx/connection"
#include "pqxx/except"
#include "pqxx/result"
#include "pqxx/transaction"

namespace fencegate::postgres {
namespace {

// Advisory lock key taken by every pg-setup run ("fencegat" in ASCII).
constexpr char kSetupLockKey[] = "7378433375094825332";

// The message of `function` refused on an armed backend (fence_hold.h).
std::string ArmedRefusal(absl::string_view function) {
  return absl::StrCat(
      function,
      "() is refused on a PostgreSQL-port session: only its gateway moves a "
      "fence there (connect with fencegate.token, or SET it)");
}

}  // namespace

bool IsPlainIdentifier(absl::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  if (absl::ascii_isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!absl::ascii_islower(static_cast<unsigned char>(c)) &&
        !absl::ascii_isdigit(static_cast<unsigned char>(c)) && c != '_') {
      return false;
    }
  }
  return true;
}

std::string OwnerRole(const std::string& schema) {
  return absl::StrCat(schema, "_owner");
}

std::string FenceCallSql(const std::string& schema) {
  return absl::StrCat("SELECT \"", schema, "\".fence($1, $2::bigint)");
}

std::string FenceNextSql(const std::string& schema) {
  return absl::StrCat("SELECT \"", schema, "\".fence_next($1, $2::bigint)");
}

std::string FenceSeqSql(const std::string& schema) {
  return absl::StrCat("SELECT \"", schema,
                      "\".fence_seq($1, $2::bigint, $3::bigint, $4)");
}

std::string ReadFencesSql(const std::string& schema) {
  return absl::StrCat("SELECT domain, token FROM \"", schema, "\".fences()");
}

std::string ReadFenceSql(const std::string& schema) {
  return absl::StrCat("SELECT token FROM \"", schema,
                      "\".fences() WHERE domain = $1");
}

std::vector<std::string> FenceSetupSql(const std::string& schema,
                                       const std::string& role,
                                       int64_t raise_wait_ms) {
  // Both names are plain identifiers (checked by the caller), so quoting
  // them with double quotes is exact.
  const std::string s = absl::StrCat("\"", schema, "\"");
  const std::string owner = absl::StrCat("\"", OwnerRole(schema), "\"");
  const std::string r = absl::StrCat("\"", role, "\"");
  const std::string fn = absl::StrCat(s, ".fence(text, bigint)");
  std::vector<std::string> sql;
  sql.push_back(
      absl::StrCat("SELECT pg_advisory_xact_lock(", kSetupLockKey, ")"));
  sql.push_back(absl::StrCat(
      "DO $$BEGIN IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE "
      "rolname = '",
      OwnerRole(schema), "') THEN CREATE ROLE ", owner,
      " NOLOGIN; END IF; END$$"));
  sql.push_back(absl::StrCat("CREATE SCHEMA IF NOT EXISTS ", s,
                             " AUTHORIZATION ", owner));
  sql.push_back(absl::StrCat("ALTER SCHEMA ", s, " OWNER TO ", owner));
  sql.push_back(absl::StrCat("REVOKE ALL ON SCHEMA ", s, " FROM PUBLIC"));
  sql.push_back(
      absl::StrCat("CREATE TABLE IF NOT EXISTS ", s,
                   ".fences (domain text PRIMARY KEY,"
                   " token bigint NOT NULL CHECK (token > 0),"
                   " updated_at timestamptz NOT NULL DEFAULT now(),"
                   " seq bigint NOT NULL DEFAULT 0 CHECK (seq >= 0))"));
  // The hash of the Write that recorded the row's seq (fence_seq()).
  sql.push_back(absl::StrCat("ALTER TABLE ", s,
                             ".fences ADD COLUMN IF NOT EXISTS seq_hash text"));
  // Tables made before (token, seq) existed get the column: 0, no seq yet.
  sql.push_back(absl::StrCat("ALTER TABLE ", s,
                             ".fences ADD COLUMN IF NOT EXISTS seq bigint NOT "
                             "NULL DEFAULT 0 CHECK (seq >= 0)"));
  sql.push_back(absl::StrCat("ALTER TABLE ", s, ".fences OWNER TO ", owner));
  sql.push_back(absl::StrCat("REVOKE ALL ON ", s, ".fences FROM PUBLIC"));
  // The only way in, for the common case: a holder writing again with its
  // token, at READ COMMITTED. It takes no row lock and writes no WAL of its
  // own: the domain's advisory lock (fence_hold.h's key),
  // shared, to the transaction's end, which every raise takes exclusively
  // (await_holders()) before it moves the row, so that a raise waits for
  // this transaction; and the row read again after the lock, in a
  // statement of its own (a snapshot of its own at READ COMMITTED), so
  // that a raise which committed while the lock was awaited is seen. The
  // plain read first keeps a raiser from holding the shared lock it would
  // then have to upgrade (two such raisers would deadlock). Everything
  // else -- a raise, a stale token, other isolation levels (whose snapshot
  // predates the lock), an armed backend, bad arguments -- goes to
  // fence_locked(). SECURITY DEFINER runs it as the owner; it has no SET
  // search_path (which costs PostgreSQL about a tenth of a fenced write's
  // time): every name in it, operators too, is schema-qualified.
  sql.push_back(absl::StrReplaceAll(
      R"sql(CREATE OR REPLACE FUNCTION $S.fence(p_domain text, p_token bigint)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER AS $fn$
DECLARE
  held bigint;
BEGIN
  IF p_token OPERATOR(pg_catalog.>=) 1
     AND pg_catalog.pg_current_xact_id_if_assigned() IS NULL
     AND pg_catalog.current_setting('transaction_isolation')
         OPERATOR(pg_catalog.=) 'read committed' THEN
    SELECT f.token INTO held FROM $S.fences AS f
      WHERE f.domain OPERATOR(pg_catalog.=) p_domain;
    IF held OPERATOR(pg_catalog.=) p_token AND NOT EXISTS (
         SELECT FROM $S.holders AS h
         WHERE h.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()) THEN
      PERFORM pg_catalog.pg_advisory_xact_lock_shared($KEY,
        pg_catalog.hashtext(p_domain) OPERATOR(pg_catalog.&) 2147483647);
      SELECT f.token INTO held FROM $S.fences AS f
        WHERE f.domain OPERATOR(pg_catalog.=) p_domain;
      IF held OPERATOR(pg_catalog.=) p_token THEN
        -- The transaction's ID, taken now, is how a later fence(),
        -- fence_seq() or fence_next() in it is refused (FG002) -- also
        -- for gateways of earlier versions, which call fence() before a
        -- Write's SQL. A transaction that writes needs one anyway.
        PERFORM pg_catalog.pg_current_xact_id();
        RETURN held;
      END IF;
    END IF;
  END IF;
  RETURN $S.fence_locked(p_domain, p_token);
END
$fn$)sql",
      {{"$S", s}, {"$KEY", absl::StrCat(kHoldLockKey)}}));
  // fence() for all but its common case (internal: fence() calls it as the
  // owner). Its own search_path keeps a caller's objects out of its name
  // lookups.
  sql.push_back(absl::StrReplaceAll(
      R"sql(CREATE OR REPLACE FUNCTION $S.fence_locked(p_domain text, p_token bigint)
RETURNS bigint LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  held bigint;
BEGIN
  IF p_domain IS NULL OR p_token IS NULL OR p_token < 1 THEN
    RAISE EXCEPTION 'fencing token must be at least 1 and domain not null'
      USING ERRCODE = '22023';
  END IF;
  -- Only as its transaction's first write: the gateway calls it first in
  -- every Write, so SQL sent through a route cannot call it again to raise
  -- some other domain's fence out of reach.
  IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN
    RAISE EXCEPTION 'fencegate.fence() must be the first write of its transaction'
      USING ERRCODE = '$ONCE';
  END IF;
  -- An equal token at REPEATABLE READ or SERIALIZABLE (or where fence()
  -- met a raise): a shared lock on the row keeps it as it is, writes no new
  -- row version, and lets a raise (whose upsert locks the row) wait for
  -- this transaction. The plain read first keeps a raiser from holding the
  -- shared lock it would then have to upgrade; the locked read sees the
  -- newest row, and at REPEATABLE READ and SERIALIZABLE fails with 40001
  -- if a raise committed after the transaction's snapshot.
  SELECT f.token INTO held FROM $S.fences AS f WHERE f.domain = p_domain;
  -- Not on a PostgreSQL-port session's connection (fence_hold.h), whose
  -- SQL is its client's: there only the gateway moves a fence, and a
  -- client's lock on another domain's row would hold that domain's raise.
  IF (held IS NULL OR held <= p_token) AND $S.armed() THEN
    RAISE EXCEPTION '$REFUSED' USING ERRCODE = '42501';
  END IF;
  IF held = p_token THEN
    SELECT f.token INTO held FROM $S.fences AS f WHERE f.domain = p_domain
      FOR SHARE;
    IF held = p_token THEN
      RETURN held;
    END IF;
  END IF;
  IF held > p_token THEN
    RAISE EXCEPTION 'stale fencing token % for domain %: the database holds %',
      p_token, quote_literal(p_domain), held
      USING ERRCODE = '$STALE', DETAIL = held::text;
  END IF;
  -- A raise waits for the connections that hold the domain (fence_hold.h).
  PERFORM $S.await_holders(p_domain);
  -- A raise starts the new token's seq at 0; a row raised to this very
  -- token meanwhile keeps its seq (fence_seq() may have recorded one).
  INSERT INTO $S.fences AS f (domain, token) VALUES (p_domain, p_token)
  ON CONFLICT (domain) DO UPDATE SET token = EXCLUDED.token,
    seq = CASE WHEN f.token = EXCLUDED.token THEN f.seq ELSE 0 END,
    updated_at = now() WHERE f.token <= EXCLUDED.token
  RETURNING f.token INTO held;
  IF held IS NULL THEN
    -- ON CONFLICT locked the row even though it kept it.
    SELECT f.token INTO held FROM $S.fences AS f WHERE f.domain = p_domain;
    RAISE EXCEPTION 'stale fencing token % for domain %: the database holds %',
      p_token, quote_literal(p_domain), held
      USING ERRCODE = '$STALE', DETAIL = held::text;
  END IF;
  RETURN held;
END
$fn$)sql",
      {{"$S", s},
       {"$STALE", kStaleSqlState},
       {"$ONCE", kNotFirstSqlState},
       {"$REFUSED", ArmedRefusal("fence")}}));
  // A gateway's lease grants and Sequence calls take their token here, so
  // that two gateways never hand out the same one: the row is raised to
  // the higher of its token + 1 and p_at_least, under its exclusive lock.
  // First write of its transaction only, as fence().
  sql.push_back(absl::StrReplaceAll(
      R"sql(CREATE OR REPLACE FUNCTION $S.fence_next(p_domain text, p_at_least bigint)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  granted bigint;
BEGIN
  IF p_domain IS NULL OR p_at_least IS NULL OR p_at_least < 1 THEN
    RAISE EXCEPTION 'fencing token must be at least 1 and domain not null'
      USING ERRCODE = '22023';
  END IF;
  IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN
    RAISE EXCEPTION 'fencegate.fence_next() must be the first write of its transaction'
      USING ERRCODE = '$ONCE';
  END IF;
  IF $S.armed() THEN
    RAISE EXCEPTION '$REFUSED' USING ERRCODE = '42501';
  END IF;
  PERFORM $S.await_holders(p_domain);
  INSERT INTO $S.fences AS f (domain, token) VALUES (p_domain, p_at_least)
  ON CONFLICT (domain) DO UPDATE SET
    token = GREATEST(f.token + 1, EXCLUDED.token), seq = 0, updated_at = now()
  RETURNING f.token INTO granted;
  RETURN granted;
END
$fn$)sql",
      {{"$S", s},
       {"$ONCE", kNotFirstSqlState},
       {"$REFUSED", ArmedRefusal("fence_next")}}));
  // fence() for a Write with a seq: under the row's exclusive lock (so a
  // second attempt of one (token, seq) waits for the first to commit or
  // roll back), refuses a stale token as fence() does; for the row's own
  // token, refuses the row's seq as applied already (FG004) and a lower
  // one as out of order (FG003), each with the row's seq in DETAIL, which
  // rolls the transaction back; otherwise records (token, seq) and the
  // Write's hash, raising the token if higher. The row's own (token, seq)
  // with another hash is another write named by the same seq (FG005). A
  // row recorded without a hash (by an earlier gateway) cannot tell, and
  // is taken as applied. First write of its transaction only.
  sql.push_back(absl::StrReplaceAll(
      R"sql(CREATE OR REPLACE FUNCTION $S.fence_seq_unarmed(p_domain text, p_token bigint, p_seq bigint, p_hash text)
RETURNS bigint LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  held bigint;
  held_seq bigint;
  held_hash text;
BEGIN
  IF p_domain IS NULL OR p_token IS NULL OR p_token < 1 OR p_seq IS NULL
     OR p_seq < 1 THEN
    RAISE EXCEPTION 'fencing token and seq must be at least 1 and domain not null'
      USING ERRCODE = '22023';
  END IF;
  IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN
    RAISE EXCEPTION 'fencegate.fence_seq() must be the first write of its transaction'
      USING ERRCODE = '$ONCE';
  END IF;
  -- A raise waits for the connections that hold the domain (fence_hold.h).
  SELECT f.token INTO held FROM $S.fences AS f WHERE f.domain = p_domain;
  IF held IS NULL OR held < p_token THEN
    PERFORM $S.await_holders(p_domain);
  END IF;
  -- The common case, a holder's next write: one UPDATE, which takes the
  -- row's lock itself (and, waiting for another attempt of this very
  -- (token, seq), looks again at the row that attempt left).
  UPDATE $S.fences AS f SET token = p_token, seq = p_seq, seq_hash = p_hash,
    updated_at = CASE WHEN f.token = p_token THEN f.updated_at ELSE now() END
    WHERE f.domain = p_domain
      AND (f.token < p_token OR (f.token = p_token AND f.seq < p_seq));
  IF FOUND THEN
    RETURN p_token;
  END IF;
  -- A new domain, a stale token, or a seq not above the row's.
  INSERT INTO $S.fences AS f (domain, token, seq, seq_hash)
    VALUES (p_domain, p_token, p_seq, p_hash) ON CONFLICT (domain) DO NOTHING;
  IF FOUND THEN
    RETURN p_token;
  END IF;
  SELECT f.token, f.seq, f.seq_hash INTO held, held_seq, held_hash
    FROM $S.fences AS f WHERE f.domain = p_domain FOR UPDATE;
  IF held > p_token THEN
    RAISE EXCEPTION 'stale fencing token % for domain %: the database holds %',
      p_token, quote_literal(p_domain), held
      USING ERRCODE = '$STALE', DETAIL = held::text;
  END IF;
  IF held = p_token AND held_seq = p_seq AND held_hash IS NOT NULL
     AND p_hash IS NOT NULL AND held_hash <> p_hash THEN
    RAISE EXCEPTION 'seq % of token % for domain % was recorded for another write',
      p_seq, p_token, quote_literal(p_domain)
      USING ERRCODE = '$OTHER', DETAIL = held_seq::text;
  END IF;
  IF held = p_token AND held_seq = p_seq THEN
    RAISE EXCEPTION 'seq % of token % for domain % is applied already',
      p_seq, p_token, quote_literal(p_domain)
      USING ERRCODE = '$APPLIED', DETAIL = held_seq::text;
  END IF;
  IF held = p_token AND held_seq > p_seq THEN
    RAISE EXCEPTION 'seq % of token % for domain % is out of order: % was applied',
      p_seq, p_token, quote_literal(p_domain), held_seq
      USING ERRCODE = '$ORDER', DETAIL = held_seq::text;
  END IF;
  -- The row moved under the first UPDATE's feet (a concurrent insert of
  -- the domain): it is locked now, and the write may go ahead.
  UPDATE $S.fences AS f SET token = p_token, seq = p_seq, seq_hash = p_hash,
    updated_at = CASE WHEN f.token = p_token THEN f.updated_at ELSE now() END
    WHERE f.domain = p_domain;
  RETURN p_token;
END
$fn$)sql",
      {{"$S", s},
       {"$STALE", kStaleSqlState},
       {"$ONCE", kNotFirstSqlState},
       {"$APPLIED", kSeqAppliedSqlState},
       {"$ORDER", kSeqOrderSqlState},
       {"$OTHER", kSeqOtherWriteSqlState}}));
  // The route role's fence_seq(): refused on a backend the port or a route
  // armed (fence_hold.h), where the gateway calls the form with the
  // connection's secret instead.
  sql.push_back(absl::StrReplaceAll(
      R"sql(CREATE OR REPLACE FUNCTION $S.fence_seq(p_domain text, p_token bigint, p_seq bigint, p_hash text)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF p_domain IS NOT NULL AND p_token >= 1 AND p_seq >= 1
     AND pg_catalog.pg_current_xact_id_if_assigned() IS NULL AND $S.armed() THEN
    RAISE EXCEPTION '$REFUSED' USING ERRCODE = '42501';
  END IF;
  RETURN $S.fence_seq_unarmed(p_domain, p_token, p_seq, p_hash);
END
$fn$)sql",
      {{"$S", s}, {"$REFUSED", ArmedRefusal("fence_seq")}}));
  // The three-argument form, which gateways before the hash call: the
  // same, recording no hash.
  sql.push_back(absl::StrReplaceAll(
      R"sql(CREATE OR REPLACE FUNCTION $S.fence_seq(p_domain text, p_token bigint, p_seq bigint)
RETURNS bigint LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT $S.fence_seq(p_domain, p_token, p_seq, NULL::text)
$fn$)sql",
      {{"$S", s}}));
  // What a gateway reads at start-up to raise its own fences (it may not
  // read the table itself).
  sql.push_back(absl::StrReplaceAll(
      R"sql(CREATE OR REPLACE FUNCTION $S.fences()
RETURNS TABLE (domain text, token bigint) LANGUAGE sql STABLE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT f.domain, f.token FROM $S.fences AS f
$fn$)sql",
      {{"$S", s}}));
  for (const char* internal :
       {".fence_locked(text, bigint)",
        ".fence_seq_unarmed(text, bigint, bigint, text)"}) {
    sql.push_back(
        absl::StrCat("ALTER FUNCTION ", s, internal, " OWNER TO ", owner));
    sql.push_back(
        absl::StrCat("REVOKE ALL ON FUNCTION ", s, internal, " FROM PUBLIC"));
  }
  for (const std::string& f :
       {fn, absl::StrCat(s, ".fence_next(text, bigint)"),
        absl::StrCat(s, ".fence_seq(text, bigint, bigint, text)"),
        absl::StrCat(s, ".fence_seq(text, bigint, bigint)"),
        absl::StrCat(s, ".fences()")}) {
    sql.push_back(absl::StrCat("ALTER FUNCTION ", f, " OWNER TO ", owner));
    sql.push_back(absl::StrCat("REVOKE ALL ON FUNCTION ", f, " FROM PUBLIC"));
    sql.push_back(absl::StrCat("GRANT EXECUTE ON FUNCTION ", f, " TO ", r));
  }
  for (std::string& statement :
       FenceHoldSetupSql(schema, role, raise_wait_ms)) {
    sql.push_back(std::move(statement));
  }
  sql.push_back(absl::StrCat("GRANT USAGE ON SCHEMA ", s, " TO ", r));
  // TEMP: a route role must not be able to keep temporary objects across
  // Writes (role_check.h). PostgreSQL grants TEMP on every database to
  // PUBLIC; when it still does, every other login role that is not a route
  // role (one that may call fence()) gets it by name first, so that nothing
  // else loses it, and PUBLIC's goes.
  sql.push_back(absl::StrReplaceAll(
      R"sql(DO $$DECLARE db text := pg_catalog.current_database(); r record;
BEGIN
  IF pg_catalog.has_database_privilege('public', db, 'TEMP') THEN
    FOR r IN SELECT rolname FROM pg_catalog.pg_roles
        WHERE rolcanlogin AND NOT rolsuper AND rolname <> '$ROLE'
          AND NOT pg_catalog.has_function_privilege(oid, '$FN', 'EXECUTE')
    LOOP
      EXECUTE pg_catalog.format('GRANT TEMPORARY ON DATABASE %I TO %I', db,
                                r.rolname);
    END LOOP;
    EXECUTE pg_catalog.format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC',
                              db);
  END IF;
  EXECUTE pg_catalog.format('REVOKE TEMPORARY ON DATABASE %I FROM %I', db,
                            '$ROLE');
END$$)sql",
      {{"$ROLE", role}, {"$FN", fn}}));
  // Fences an earlier version kept in public.fencegate_fences: carried
  // over, raising only, so that no old holder is re-admitted.
  sql.push_back(absl::StrCat(
      "DO $$BEGIN IF to_regclass('public.fencegate_fences') IS NOT NULL THEN "
      "INSERT INTO ",
      s,
      ".fences AS f (domain, token) SELECT domain, token FROM "
      "public.fencegate_fences WHERE token > 0 ON CONFLICT (domain) DO UPDATE "
      "SET token = EXCLUDED.token, seq = 0 WHERE f.token < EXCLUDED.token; "
      "END IF; END$$"));
  return sql;
}

absl::Status SetUpFenceSchema(const std::string& admin_conninfo,
                              const std::string& schema,
                              const std::string& role, int64_t raise_wait_ms) {
  if (absl::Status s = CheckName("schema", schema); !s.ok()) return s;
  if (absl::Status s = CheckName("role", role); !s.ok()) return s;
  if (raise_wait_ms < 10 || raise_wait_ms > 3600 * 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("raise_wait_ms ", raise_wait_ms,
                     ": a raise waits for holders from 10 ms to an hour"));
  }
  if (role == OwnerRole(schema)) {
    return absl::FailedPreconditionError(
        absl::StrCat("role \"", role,
                     "\" is the fence schema's owner: a route's role must not "
                     "be able to write the fence table"));
  }
  return InAdminTransaction(admin_conninfo, [&](pqxx::work& tx) {
    if (!RoleExists(tx, role)) {
      return absl::NotFoundError(
          absl::StrCat("pg-setup: role \"", role,
                       "\" does not exist; create it first, e.g. CREATE ROLE ",
                       role, " LOGIN PASSWORD '...'"));
    }
    for (const std::string& statement :
         FenceSetupSql(schema, role, raise_wait_ms)) {
      tx.exec(statement);
    }
    return absl::OkStatus();
  });
}

const std::vector<std::string>& SessionStateFunctions() {
  static const auto* const kNames = new std::vector<std::string>{
      "set_config",
      "pg_advisory_lock",
      "pg_advisory_lock_shared",
      "pg_try_advisory_lock",
      "pg_try_advisory_lock_shared",
      "pg_advisory_unlock",
      "pg_advisory_unlock_shared",
      "pg_advisory_unlock_all",
      "currval",
      "lastval",
      "query_to_xml",
      "query_to_xmlschema",
      "query_to_xml_and_xmlschema",
      "cursor_to_xml",
      "cursor_to_xmlschema",
      "ts_stat",
      "ts_rewrite",
      "lo_import",
      "lo_export",
      "pg_cancel_backend",
      "pg_terminate_backend",
      "setseed",
      "connectby",
      "xpath_table",
  };
  return *kNames;
}

const std::vector<std::string>& SessionStateFunctionPrefixes() {
  static const auto* const kPrefixes =
      new std::vector<std::string>{"dblink", "crosstab"};
  return *kPrefixes;
}

std::string SessionFunctionsCondition() {
  std::string names;
  for (const std::string& name : SessionStateFunctions()) {
    absl::StrAppend(&names, names.empty() ? "" : ", ", "'", name, "'");
  }
  std::string condition = absl::StrCat("(p.proname IN (", names, ") OR ",
                                       AdvisoryFunctionsCondition());
  for (const std::string& prefix : SessionStateFunctionPrefixes()) {
    absl::StrAppend(&condition, " OR p.proname LIKE '", prefix, "%'");
  }
  return absl::StrCat(condition, ")");
}

std::string SessionFunctionsSql() {
  return absl::StrCat(
      "SELECT p.oid::pg_catalog.regprocedure::text FROM pg_catalog.pg_proc p "
      "WHERE ",
      SessionFunctionsCondition(), " ORDER BY 1");
}

absl::StatusOr<std::vector<std::string>> RevokeSessionFunctions(
    const std::string& admin_conninfo, const std::string& role,
    const std::vector<std::string>& grant_to) {
  for (const std::string& r : grant_to) {
    if (absl::Status s = CheckName("role", r); !s.ok()) return s;
    if (r == role) {
      return absl::InvalidArgumentError(absl::StrCat(
          "role \"", r,
          "\" is the route's role: the session functions are revoked from "
          "it; name the other roles that need them"));
    }
  }
  if (absl::Status s = CheckName("role", role); !s.ok()) return s;
  std::vector<std::string> revoked;
  absl::Status s = InAdminTransaction(admin_conninfo, [&](pqxx::work& tx) {
    std::vector<std::string> roles = grant_to;
    roles.push_back(role);
    for (const std::string& r : roles) {
      if (!RoleExists(tx, r)) {
        return absl::NotFoundError(
            absl::StrCat("pg-setup: role \"", r, "\" does not exist"));
      }
    }
    for (const pqxx::row& row : tx.exec(SessionFunctionsSql())) {
      revoked.push_back(row[0].as<std::string>());
    }
    for (const std::string& f : revoked) {
      tx.exec(absl::StrCat("REVOKE EXECUTE ON FUNCTION ", f, " FROM PUBLIC, ",
                           role));
      for (const std::string& r : grant_to) {
        tx.exec(absl::StrCat("GRANT EXECUTE ON FUNCTION ", f, " TO ", r));
      }
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return revoked;
}

}  // namespace fencegate::postgres
