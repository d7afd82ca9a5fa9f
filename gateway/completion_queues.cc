// Copyright fencegate authors.

#include "gateway/completion_queues.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "fencegate/common/thread_name.h"

namespace fencegate {

CompletionQueues::CompletionQueues(grpc::ServerBuilder* builder, size_t count) {
  for (size_t i = 0; i < std::max<size_t>(count, 1); ++i) {
    queues_.push_back(builder->AddCompletionQueue());
  }
}

CompletionQueues::~CompletionQueues() { Stop(); }

void CompletionQueues::Start() {
  for (size_t i = 0; i < queues_.size(); ++i) {
    threads_.emplace_back([queue = queues_[i].get(), i] {
      NameThisThread(absl::StrCat("fg-cq", i));
      void* tag = nullptr;
      bool ok = false;
      while (queue->Next(&tag, &ok)) {
        static_cast<QueueTag*>(tag)->Proceed(ok);
      }
    });
  }
}

void CompletionQueues::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (!threads_.empty()) WaitForCalls();
  for (const std::unique_ptr<grpc::ServerCompletionQueue>& queue : queues_) {
    queue->Shutdown();
  }
  for (std::thread& thread : threads_) thread.join();
  // A queue whose thread never ran still holds its events: drained here,
  // as gRPC requires before the queue is destroyed.
  if (threads_.empty()) {
    for (const std::unique_ptr<grpc::ServerCompletionQueue>& queue : queues_) {
      void* tag = nullptr;
      bool ok = false;
      while (queue->Next(&tag, &ok)) {
        static_cast<QueueTag*>(tag)->Proceed(ok);
      }
    }
  }
}

}  // namespace fencegate
