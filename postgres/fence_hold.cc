// Copyright fencegate authors.

#include "postgres/fence_hold.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "postgres/fence_schema.h"
#include "postgres/sqlstates.h"

namespace fencegate::postgres {

std::string HoldSql(const std::string& schema) {
  return absl::StrCat("SELECT \"", schema, "\".hold($1, $2::bigint, $3)");
}

std::string FenceHoldSql(const std::string& schema) {
  return absl::StrCat("SELECT \"", schema, "\".fence_hold($1, $2::bigint, $3)");
}

std::string FenceSeqArmedSql(const std::string& schema) {
  return absl::StrCat("SELECT \"", schema,
                      "\".fence_seq($1, $2::bigint, $3::bigint, $4, $5)");
}

std::string ReleaseSql(const std::string& schema) {
  return absl::StrCat("SELECT FROM \"", schema, "\".release($1, $2)");
}

std::string RaisesWaitingSql(const std::string& schema) {
  return absl::StrCat(
      "SELECT pg_catalog.string_agg(u.i::text, ',') FROM "
      "pg_catalog.unnest($1::text[]) WITH ORDINALITY AS u(d, i) WHERE u.d IN "
      "(SELECT \"",
      schema, "\".raises_waiting($1::text[]))");
}

std::string TextArrayLiteral(const std::vector<std::string>& values) {
  std::string out = "{";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out.push_back(',');
    out.push_back('"');
    for (char c : values[i]) {
      if (c == '"' || c == '\\') out.push_back('\\');
      out.push_back(c);
    }
    out.push_back('"');
  }
  out.push_back('}');
  return out;
}

std::string AdvisoryFunctionsCondition() {
  return "(p.proname LIKE 'pg\\_%advisory\\_%')";
}

std::vector<std::string> FenceHoldSetupSql(const std::string& schema,
                                           const std::string& role,
                                           int64_t raise_wait_ms) {
  const std::string s = absl::StrCat("\"", schema, "\"");
  const std::string owner = absl::StrCat("\"", OwnerRole(schema), "\"");
  const std::string r = absl::StrCat("\"", role, "\"");
  const std::vector<std::pair<const absl::string_view, std::string>> names = {
      {"$S", s},
      {"$KEY", absl::StrCat(kHoldLockKey)},
      {"$ARM", absl::StrCat(kArmLockKey)},
      {"$WAIT", absl::StrCat(raise_wait_ms)},
      // A hold waits behind a raise, which waits at most $WAIT for the
      // holders before it ends them.
      {"$HOLDWAIT", absl::StrCat(2 * raise_wait_ms + 1000)},
      {"$VERSION", absl::StrCat(kFenceSchemaVersion)},
      {"$ONCE", kNotFirstSqlState},
      {"$STALE", kStaleSqlState},
      {"$HELDHERE", kHeldHereSqlState}};
  std::vector<std::string> sql;
  // What the functions run as the owner needs, whoever else may call it:
  // granted by name, so that pg-setup --revoke_session_functions (which
  // takes the advisory functions from PUBLIC) leaves them to the owner.
  sql.push_back(absl::StrCat("GRANT pg_signal_backend TO ", owner));
  sql.push_back(absl::StrCat(
      "GRANT EXECUTE ON FUNCTION pg_catalog.pg_advisory_lock(integer, "
      "integer), pg_catalog.pg_advisory_lock_shared(integer, integer), "
      "pg_catalog.pg_advisory_unlock_shared(integer, integer), "
      "pg_catalog.pg_advisory_unlock(integer, integer), "
      "pg_catalog.pg_advisory_xact_lock(integer, integer), "
      "pg_catalog.pg_advisory_xact_lock_shared(integer, integer), "
      "pg_catalog.pg_terminate_backend(integer, bigint), "
      "pg_catalog.set_config(text, text, boolean) TO ",
      owner));
  // The armed backends' secrets (a SHA-256 of each). Unlogged: after a
  // crash every backend is gone, and so is every hold.
  sql.push_back(absl::StrCat("CREATE UNLOGGED TABLE IF NOT EXISTS ", s,
                             ".holders (pid integer PRIMARY KEY, secret bytea "
                             "NOT NULL)"));
  sql.push_back(absl::StrCat("ALTER TABLE ", s, ".holders OWNER TO ", owner));
  sql.push_back(absl::StrCat("REVOKE ALL ON ", s, ".holders FROM PUBLIC"));
  // A raise's wait: D's lock, exclusively, for the raise's transaction.
  // Holders that have not given D up within $WAIT ms have their backends
  // ended (their transactions roll back), then the lock is taken; a holder
  // that cannot be ended (a superuser's backend) fails the raise with
  // lock_timeout's 55P03. Internal: called by the raising functions only.
  sql.push_back(absl::StrReplaceAll(
      R"sql(CREATE OR REPLACE FUNCTION $S.await_holders(p_domain text)
RETURNS void LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp SET client_min_messages = error AS $fn$
DECLARE
  k integer := pg_catalog.hashtext(p_domain) & 2147483647;
  saved text := pg_catalog.current_setting('lock_timeout');
BEGIN
  -- A backend's lock never makes it wait: a connection that holds the
  -- domain (its session's shared lock) and raised it would keep holding
  -- it at the old token, and its gateway would send that token's Writes
  -- with no fence statement after the raise. Refused; the lock given up
  -- by the refusal (a session's lock outlives the rolled-back raise), the
  -- gateway's release follows.
  IF pg_catalog.pg_advisory_unlock_shared($KEY, k) THEN
    RAISE EXCEPTION 'this connection holds domain % itself: it must release it before raising it',
      pg_catalog.quote_literal(p_domain)
      USING ERRCODE = '$HELDHERE';
  END IF;
  PERFORM pg_catalog.set_config('lock_timeout', '$WAIT', true);
  BEGIN
    PERFORM pg_catalog.pg_advisory_xact_lock($KEY, k);
  EXCEPTION WHEN lock_not_available THEN
    PERFORM pg_catalog.pg_terminate_backend(l.pid, $WAIT)
      FROM pg_catalog.pg_locks AS l
      WHERE l.locktype = 'advisory' AND l.granted
        AND l.classid = $KEY::oid AND l.objid = k::oid AND l.objsubid = 2
        AND l.pid <> pg_catalog.pg_backend_pid()
        AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d
                          WHERE d.datname = pg_catalog.current_database());
    PERFORM pg_catalog.pg_advisory_xact_lock($KEY, k);
  END;
  PERFORM pg_catalog.set_config('lock_timeout', saved, true);
END
$fn$)sql",
      names));
  // True if this backend is armed (a PostgreSQL-port session's server
  // connection, whose SQL comes from the port's client): fence(),
  // fence_seq() and fence_next() refuse it, so that only the gateway, through
  // hold() and its secret, moves a fence there. Internal. Most backends have
  // no holders row (one index probe); a row left by an ended backend whose
  // pid came back is told apart by the arm lock (released and taken again,
  // the warning of a lock not held kept from the client).
  sql.push_back(absl::StrReplaceAll(
      R"sql(CREATE OR REPLACE FUNCTION $S.armed()
RETURNS boolean LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  me integer := pg_catalog.pg_backend_pid();
  saved text;
  mine boolean;
BEGIN
  IF NOT EXISTS (SELECT FROM $S.holders AS h WHERE h.pid = me) THEN
    RETURN false;
  END IF;
  saved := pg_catalog.current_setting('client_min_messages');
  PERFORM pg_catalog.set_config('client_min_messages', 'error', true);
  mine := pg_catalog.pg_advisory_unlock($ARM, me);
  IF mine THEN
    PERFORM pg_catalog.pg_advisory_lock($ARM, me);
  END IF;
  PERFORM pg_catalog.set_config('client_min_messages', saved, true);
  RETURN mine;
END
$fn$)sql",
      names));
  // A raise of the domain's row to `p_token` by hold() or fence_hold():
  // waits for the domain's holders (await_holders()), then raises the row
  // unless a higher raise committed first (a new token's seq starts at 0).
  // Returns the row's token after it: `p_token` if raised, the higher one
  // if stale. Internal.
  sql.push_back(absl::StrReplaceAll(
      R"sql(CREATE OR REPLACE FUNCTION $S.raise_row(p_domain text, p_token bigint)
RETURNS bigint LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  held bigint;
BEGIN
  PERFORM $S.await_holders(p_domain);
  INSERT INTO $S.fences AS f (domain, token) VALUES (p_domain, p_token)
  ON CONFLICT (domain) DO UPDATE SET token = EXCLUDED.token,
    seq = CASE WHEN f.token = EXCLUDED.token THEN f.seq ELSE 0 END,
    updated_at = now() WHERE f.token <= EXCLUDED.token
  RETURNING f.token INTO held;
  IF held IS NULL THEN
    SELECT f.token INTO held FROM $S.fences AS f WHERE f.domain = p_domain;
  END IF;
  RETURN held;
END
$fn$)sql",
      names));
  // The gateway's hold (fence_hold.h). It reads the fence row in a later
  // statement than the one that waited for the lock, at READ COMMITTED,
  // so that it sees every raise that committed before the lock was given.
  sql.push_back(absl::StrReplaceAll(
      R"sql(CREATE OR REPLACE FUNCTION $S.hold(p_domain text, p_token bigint, p_secret text)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET client_min_messages = error AS $fn$
DECLARE
  me integer := pg_catalog.pg_backend_pid();
  k integer;
  held bigint;
BEGIN
  IF p_secret IS NULL OR pg_catalog.length(p_secret) < 16 THEN
    RAISE EXCEPTION 'hold() needs the connection''s secret'
      USING ERRCODE = '22023';
  END IF;
  -- First in its transaction, as the gateway always calls it: SQL sent
  -- through a route, after the Write's fence() took the transaction's ID,
  -- cannot arm the connection or raise a domain with it.
  IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN
    RAISE EXCEPTION 'hold() must be the first write of its transaction'
      USING ERRCODE = '$ONCE';
  END IF;
  IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'hold() runs at READ COMMITTED only: it reads the fence row after its lock'
      USING ERRCODE = '25001';
  END IF;
  -- Armed with another secret: this backend holds its arm lock. Released
  -- and taken again to tell (no other backend can take this key in
  -- between), which is cheaper than reading pg_locks.
  IF NOT $S.armed_with(p_secret) THEN
    IF pg_catalog.pg_advisory_unlock($ARM, me) THEN
      PERFORM pg_catalog.pg_advisory_lock($ARM, me);
      RAISE EXCEPTION 'this connection is held by its gateway: hold() needs its secret'
        USING ERRCODE = '42501';
    END IF;
    INSERT INTO $S.holders AS h (pid, secret)
      VALUES (me, pg_catalog.sha256(pg_catalog.convert_to(p_secret, 'UTF8')))
      ON CONFLICT (pid) DO UPDATE SET secret = EXCLUDED.secret;
    PERFORM pg_catalog.pg_advisory_lock($ARM, me);
  END IF;
  IF p_domain IS NULL THEN
    RETURN 0;  -- armed only: a session without a token
  END IF;
  IF p_token IS NULL OR p_token < 1 THEN
    RAISE EXCEPTION 'fencing token must be at least 1'
      USING ERRCODE = '22023';
  END IF;
  k := pg_catalog.hashtext(p_domain) & 2147483647;
  PERFORM pg_catalog.set_config('lock_timeout', '$HOLDWAIT', true);
  -- Lower (or no row): the gateway's raise, which it admitted before the
  -- call. It waits for the connections that hold the domain at an older
  -- token, as every raise does; a higher raise that commits first wins.
  SELECT f.token INTO held FROM $S.fences AS f WHERE f.domain = p_domain;
  IF held IS NULL OR held < p_token THEN
    held := $S.raise_row(p_domain, p_token);
    IF held <> p_token THEN
      RETURN held;  -- stale: raised past p_token meanwhile
    END IF;
  END IF;
  -- This backend's own raise (its transaction's exclusive lock on the
  -- domain) does not conflict with its shared one.
  PERFORM pg_catalog.pg_advisory_lock_shared($KEY, k);
  SELECT f.token INTO held FROM $S.fences AS f WHERE f.domain = p_domain;
  IF held IS DISTINCT FROM p_token THEN
    -- Stale (the row is higher) or not raised yet (lower): nothing held.
    PERFORM pg_catalog.pg_advisory_unlock_shared($KEY, k);
  END IF;
  RETURN COALESCE(held, 0);
END
$fn$)sql",
      names));
  // Whether this backend is armed with `p_secret` (its arm lock, and its
  // holders row with the secret's hash). Internal.
  sql.push_back(absl::StrReplaceAll(
      R"sql(CREATE OR REPLACE FUNCTION $S.armed_with(p_secret text)
RETURNS boolean LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp SET client_min_messages = error AS $fn$
DECLARE
  me integer := pg_catalog.pg_backend_pid();
BEGIN
  IF p_secret IS NULL OR NOT pg_catalog.pg_advisory_unlock($ARM, me) THEN
    RETURN false;
  END IF;
  PERFORM pg_catalog.pg_advisory_lock($ARM, me);
  RETURN EXISTS (
    SELECT FROM $S.holders AS h
    WHERE h.pid = me
      AND h.secret = pg_catalog.sha256(pg_catalog.convert_to(p_secret, 'UTF8')));
END
$fn$)sql",
      names));
  // fence() for a gRPC route's armed connection (fence_hold.h): the
  // Write's check, as its transaction's first write, that also leaves the
  // domain held by the connection when the row already held the token, so
  // that its next Writes of the token need no statement (true: held). A
  // lower row is raised (waiting for the domain's holders, as every raise
  // does), and not held (false): the raise keeps the domain's lock
  // exclusively to its transaction's end, and a token that keeps changing
  // is not worth holding. A higher row fails FG001 with the row's token in
  // DETAIL, holding nothing. The row is read again after the shared lock
  // is given, in a statement of its own, so that a raise that committed
  // meanwhile is seen. The lock is a session's: it outlives the
  // transaction even if the Write's SQL then fails, which the gateway
  // answers by releasing the domain.
  sql.push_back(absl::StrReplaceAll(
      R"sql(CREATE OR REPLACE FUNCTION $S.fence_hold(p_domain text, p_token bigint, p_secret text)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET client_min_messages = error AS $fn$
DECLARE
  k integer;
  held bigint;
  raised boolean := false;
  saved text := pg_catalog.current_setting('lock_timeout');
BEGIN
  IF p_domain IS NULL OR p_token IS NULL OR p_token < 1 THEN
    RAISE EXCEPTION 'fencing token must be at least 1 and domain not null'
      USING ERRCODE = '22023';
  END IF;
  IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN
    RAISE EXCEPTION 'fence_hold() must be the first write of its transaction'
      USING ERRCODE = '$ONCE';
  END IF;
  IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'fence_hold() runs at READ COMMITTED only: it reads the fence row after its lock'
      USING ERRCODE = '25001';
  END IF;
  IF NOT $S.armed_with(p_secret) THEN
    RAISE EXCEPTION 'fence_hold() needs the secret this connection was armed with'
      USING ERRCODE = '42501';
  END IF;
  k := pg_catalog.hashtext(p_domain) & 2147483647;
  PERFORM pg_catalog.set_config('lock_timeout', '$HOLDWAIT', true);
  SELECT f.token INTO held FROM $S.fences AS f WHERE f.domain = p_domain;
  IF held IS NULL OR held < p_token THEN
    held := $S.raise_row(p_domain, p_token);
    raised := held = p_token;
  END IF;
  -- A raise holds the domain's lock exclusively to its transaction's end,
  -- and is not held after it: a token that changes is held from its next
  -- Write on, which finds the row unchanged.
  IF held = p_token AND NOT raised THEN
    PERFORM pg_catalog.pg_advisory_lock_shared($KEY, k);
    SELECT f.token INTO held FROM $S.fences AS f WHERE f.domain = p_domain;
    IF held IS DISTINCT FROM p_token THEN
      PERFORM pg_catalog.pg_advisory_unlock_shared($KEY, k);
    END IF;
  END IF;
  PERFORM pg_catalog.set_config('lock_timeout', saved, true);
  IF held IS DISTINCT FROM p_token THEN
    RAISE EXCEPTION 'stale fencing token % for domain %: the database holds %',
      p_token, pg_catalog.quote_literal(p_domain), held
      USING ERRCODE = '$STALE', DETAIL = held::text;
  END IF;
  -- Any later fence call in this transaction: FG002.
  PERFORM pg_catalog.pg_current_xact_id();
  RETURN NOT raised;
END
$fn$)sql",
      names));
  // fence_seq() for an armed connection, with its secret.
  sql.push_back(absl::StrReplaceAll(
      R"sql(CREATE OR REPLACE FUNCTION $S.fence_seq(p_domain text, p_token bigint, p_seq bigint, p_hash text, p_secret text)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF p_domain IS NOT NULL AND p_token >= 1 AND p_seq >= 1
     AND pg_catalog.pg_current_xact_id_if_assigned() IS NULL
     AND NOT $S.armed_with(p_secret) THEN
    RAISE EXCEPTION 'fence_seq() with a secret needs the one this connection was armed with'
      USING ERRCODE = '42501';
  END IF;
  RETURN $S.fence_seq_unarmed(p_domain, p_token, p_seq, p_hash);
END
$fn$)sql",
      names));
  // The gateway's release of a domain its connection holds (a session's
  // token change), with the connection's secret. Unlocking a lock not held
  // is a WARNING, which the function's own client_min_messages keeps from
  // the client.
  sql.push_back(absl::StrReplaceAll(
      R"sql(CREATE OR REPLACE FUNCTION $S.release(p_domain text, p_secret text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET client_min_messages = error AS $fn$
DECLARE
  me integer := pg_catalog.pg_backend_pid();
  k integer := pg_catalog.hashtext(p_domain) & 2147483647;
BEGIN
  IF p_domain IS NULL OR p_secret IS NULL THEN
    RAISE EXCEPTION 'release() needs a domain and the connection''s secret'
      USING ERRCODE = '22023';
  END IF;
  IF NOT $S.armed_with(p_secret) THEN
    RAISE EXCEPTION 'release() needs the secret this connection was armed with'
      USING ERRCODE = '42501';
  END IF;
  WHILE pg_catalog.pg_advisory_unlock_shared($KEY, k) LOOP
  END LOOP;
END
$fn$)sql",
      names));
  // What a gateway polls: which of its held domains a raise waits for.
  sql.push_back(absl::StrReplaceAll(
      R"sql(CREATE OR REPLACE FUNCTION $S.raises_waiting(p_domains text[])
RETURNS SETOF text LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT d FROM pg_catalog.unnest(p_domains) AS d
  WHERE EXISTS (
    SELECT FROM pg_catalog.pg_locks AS l
    WHERE l.locktype = 'advisory' AND NOT l.granted
      AND l.mode = 'ExclusiveLock' AND l.classid = $KEY::oid
      AND l.objid = (pg_catalog.hashtext(d) & 2147483647)::oid
      AND l.objsubid = 2
      AND l.database = (SELECT o.oid FROM pg_catalog.pg_database AS o
                        WHERE o.datname = pg_catalog.current_database()))
$fn$)sql",
      names));
  sql.push_back(absl::StrReplaceAll(
      R"sql(CREATE OR REPLACE FUNCTION $S.version()
RETURNS integer LANGUAGE sql IMMUTABLE AS $fn$ SELECT $VERSION $fn$)sql",
      names));
  for (const char* f :
       {".await_holders(text)", ".armed()", ".armed_with(text)",
        ".raise_row(text, bigint)", ".hold(text, bigint, text)",
        ".fence_hold(text, bigint, text)",
        ".fence_seq(text, bigint, bigint, text, text)", ".release(text, text)",
        ".raises_waiting(text[])", ".version()"}) {
    const std::string fn = absl::StrCat(s, f);
    sql.push_back(absl::StrCat("ALTER FUNCTION ", fn, " OWNER TO ", owner));
    sql.push_back(absl::StrCat("REVOKE ALL ON FUNCTION ", fn, " FROM PUBLIC"));
    if (absl::string_view(f) != ".await_holders(text)" &&
        absl::string_view(f) != ".armed()" &&
        absl::string_view(f) != ".armed_with(text)" &&
        absl::string_view(f) != ".raise_row(text, bigint)") {
      sql.push_back(absl::StrCat("GRANT EXECUTE ON FUNCTION ", fn, " TO ", r));
    }
  }
  return sql;
}

}  // namespace fencegate::postgres
