// Copyright fencegate authors.
//
// HolderId: the unique id a token source stores with a lock it takes, so
// that renewals and releases touch the lock only while it is still this
// holder's. Private to client/.

#ifndef CLIENT_HOLDER_ID_H_
#define CLIENT_HOLDER_ID_H_

#include <string>

namespace fencegate::client::internal {

// `owner` (or "<host>:<pid>" if empty) and 64 random bits, unique to one
// acquisition.
std::string HolderId(const std::string& owner);

}  // namespace fencegate::client::internal

#endif  // CLIENT_HOLDER_ID_H_
