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

  Policy policy_;
};

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_POSTGRES_PG_CONNECTION_H_
