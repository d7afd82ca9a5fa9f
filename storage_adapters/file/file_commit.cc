// Copyright fencegate authors.

#include "storage_adapters/file/file_commit.h"

#include "absl/strings/str_cat.h"
#include "fencegate/common/sync_point.h"
#include "storage_adapters/file/file_io.h"

namespace fencegate {
namespace {

void FailOp(FileWrite& w, const absl::Status& s) {
  w.status = absl::Status(
      s.code(),
      absl::StrCat("ops[", w.op_index, "] (", w.op_index, " of ", w.op_count,
                   " operations applied): ", s.message()));
}

}  // namespace

void CommitFileWrites(int sync_fd, absl::string_view root,
                      absl::Span<FileWrite* const> writes) {
  // 1. The temporaries.
  if (absl::Status s = file_io::SyncFs(sync_fd, root); !s.ok()) {
    for (FileWrite* w : writes) FailOp(*w, s);
    return;
  }
  FENCEGATE_SYNC_POINT("FileAdapter::Apply:BeforeRecord");
  // 2. The records.
  bool raised = false;
  for (FileWrite* w : writes) {
    if (!w->record.raise_prepared()) continue;
    if (absl::Status s = w->record.CommitRaise(); !s.ok()) {
      w->status = s;
    } else {
      raised = true;
    }
  }
  if (raised) {
    if (absl::Status s = file_io::SyncFs(sync_fd, root); !s.ok()) {
      for (FileWrite* w : writes) {
        if (w->status.ok()) w->status = s;
      }
      return;
    }
  }
  FENCEGATE_SYNC_POINT("FileAdapter::Apply:AfterRecord");
  // 3. The changes.
  bool made = false;
  for (FileWrite* w : writes) {
    if (!w->status.ok()) continue;
    if (absl::Status s = w->change->Make(); !s.ok()) {
      FailOp(*w, s);
    } else {
      made = true;
    }
  }
  if (!made) return;
  if (absl::Status s = file_io::SyncFs(sync_fd, root); !s.ok()) {
    for (FileWrite* w : writes) {
      if (!w->status.ok()) continue;
      w->change->Undo();
      FailOp(*w, s);
    }
  }
}

}  // namespace fencegate
