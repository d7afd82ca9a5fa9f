// Copyright fencegate authors.
//
// PgConnection: a libpqxx connection that also lends out its libpq handle.
//
// libpqxx opens, sets up and closes the connection; the adapter's write path
// uses libpq's pipeline mode on the same handle (libpqxx 6 has no API for
// it), which sends a whole Write -- fence upsert, statements, sync -- in one
// round trip. The two never overlap: libpqxx is used only while no pipeline
// is open, and the pipeline only while no libpqxx transaction is.
//
// Thread safety: none; one thread at a time (the pool hands it to one).

#ifndef STORAGE_ADAPTERS_POSTGRES_PG_CONNECTION_H_
#define STORAGE_ADAPTERS_POSTGRES_PG_CONNECTION_H_

#include <libpq-fe.h>

#include <string>

#include "pqxx/connection"
#include "pqxx/connection_base"

namespace fencegate {

class PgConnection final : public pqxx::connection_base {
 public:
  // Connects now; throws pqxx::broken_connection if it cannot.
  explicit PgConnection(const std::string& conninfo);
  PgConnection(const PgConnection&) = delete;
  PgConnection& operator=(const PgConnection&) = delete;
  ~PgConnection() noexcept;

  // The libpq handle, or nullptr once libpqxx dropped the connection.
  // Owned by this object.
  PGconn* raw() const { return policy_.current(); }

  // True if the connection can take a request: open, idle, and the server
  // has sent nothing since the last request (a server that shuts down or
  // terminates the session sends its goodbye). Never blocks.
  bool IdleAndAlive();

  // True once the server sent a FATAL or PANIC error while no query of
  // ours was running (between two pipeline syncs, say): it ended the
  // session there, before the next query. libpq hands such an error to the
  // notice receiver, not to a result; other notices are dropped.
  bool ended_between_queries() const { return ended_between_queries_; }

 private:
  // Records the handle libpqxx opens and forgets it when libpqxx drops it.
  class Policy final : public pqxx::connect_direct {
   public:
    explicit Policy(const std::string& opts) : connect_direct(opts) {}
    handle do_startconnect(handle orig) override;
    handle do_completeconnect(handle orig) override;
    handle do_dropconnect(handle orig) noexcept override;
    handle do_disconnect(handle orig) noexcept override;
    PGconn* current() const { return handle_; }

   private:
    PGconn* handle_ = nullptr;
  };

  static void OnNotice(void* self, const PGresult* notice);

  Policy policy_;
  bool ended_between_queries_ = false;
};

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_POSTGRES_PG_CONNECTION_H_
