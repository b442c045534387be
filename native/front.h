// The native gRPC front of the RocketMQ endpoint (docs/grpc.md, "Native front").
//
// A grpc::AsyncGenericService server: it knows no protobuf. Every call is
// named by its method's index in the table given at construction; its request
// bytes, client metadata, peer and deadline become events that the owner
// takes in batches (Drain), and the owner's answers (stream messages, ends)
// come back in batches (Submit). Nothing here calls into Python: the module
// binding (module.cc) converts a whole batch with the GIL taken once.
#pragma once

#include <grpcpp/alarm.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace front {

enum EventKind : int {
  // a call arrived: for a unary or server-streaming method with its one
  // request message, for a bidirectional one without (MESSAGEs follow)
  kNewCall = 0,
  // a request message of a bidirectional call
  kMessage = 1,
  // the client closed its side of a bidirectional call (or it broke)
  kHalfClose = 2,
  // the call ended before the owner finished it: the client cancelled,
  // disconnected, or its deadline passed
  kCancelled = 3,
};

struct Event {
  int kind = kNewCall;
  uint64_t id = 0;
  int method = -1;
  std::vector<std::pair<std::string, std::string>> metadata;
  std::string peer;
  // seconds left before the call's deadline when it arrived; < 0: none
  double timeout = -1;
  std::string data;
};

enum OpKind : int {
  kWrite = 0,   // one stream message
  kFinish = 1,  // the status, after `data` when has_data (a unary answer)
};

struct Op {
  uint64_t id = 0;
  int kind = kWrite;
  bool has_data = false;
  std::string data;
  int code = 0;
  std::string message;
};

struct Stats {
  uint64_t calls = 0, events = 0, drains = 0, ops = 0, submits = 0;
};

class Call;

class Front {
 public:
  // methods: full names ("/pkg.Service/Method"); bidi[i]: the client streams
  // coalesce_us > 0: under load the eventfd is signalled at most once per
  // coalesce_us after a Drain (events arriving sooner wait for the rest of
  // that time, so that one hand-over takes them all). Not under load, at
  // once: the first event after a quiet spell, and any event after a Drain
  // that took a single one (a lone client calling one call after another
  // would otherwise wait every time, for nothing to join its call).
  Front(std::vector<std::string> methods, std::vector<bool> bidi,
        int max_message, bool reuseport, int coalesce_us = 0);
  ~Front();
  Front(const Front&) = delete;
  Front& operator=(const Front&) = delete;

  // Before Start: listen on "host:port" (port 0: any), with TLS when a PEM
  // key and certificate chain are given. The bound ports: BoundPorts, after
  // Start.
  void AddPort(const std::string& address, const std::string& key_pem = "",
               const std::string& cert_pem = "");
  // Start serving with `threads` completion-queue threads; false if a port
  // could not be bound. threads = 0: none, the owner's thread polls the
  // completion queue itself (Poll), with no hand-over between threads.
  bool Start(int threads);
  std::vector<int> BoundPorts() const { return bound_; }
  // Cancel what is in flight (after `grace_s`), stop the threads.
  void Shutdown(double grace_s);

  // The events so far (appended to out); never blocks.
  void Drain(std::vector<Event>* out);
  // Wait until there are events or `timeout_s` passed (tests, no Python).
  bool Wait(double timeout_s);
  // An eventfd readable while events wait (for an event loop; not
  // signalled when the owner polls).
  int fd() const { return efd_; }
  // Started with threads = 0: serve gRPC on the calling thread until there
  // are events for the owner, Poke is called, or `timeout_s` passed (< 0:
  // no limit); then whatever else is ready at once. Whether events wait.
  bool Poll(double timeout_s);
  // From any thread: make a Poll in progress (or the next one) return.
  void Poke();
  bool polling() const { return poll_mode_; }

  void Submit(std::vector<Op>&& ops);
  Stats stats();
  size_t live_calls();

 private:
  friend class Call;
  void Serve();
  void Spawn();
  // A completion-queue event: a call's (Handle) or Poke's alarm.
  void Dispatch(void* tag, bool ok);
  void Handle(Call* c, int tag_kind, bool ok);
  void Emit(Event&& ev);
  void Signal();           // the eventfd and ev_cv_, with ev_mu_ not held
  void SignalIfDue();      // a deferred signal whose time has come
  void StartNext(Call* c);  // with mu_ held
  void MaybeDelete(Call* c);  // with mu_ held

  std::vector<std::string> methods_;
  std::vector<bool> bidi_;
  std::unordered_map<std::string, int> index_;
  int max_message_;
  bool reuseport_;
  struct Port {
    std::string address, key_pem, cert_pem;
  };
  std::vector<Port> addresses_;
  std::vector<int> bound_;

  grpc::AsyncGenericService service_;
  std::unique_ptr<grpc::ServerCompletionQueue> cq_;
  bool poll_mode_ = false;
  std::mutex poll_mu_;      // held by Poll; Shutdown waits for it
  bool cq_drained_ = false;  // poll_mu_: the queue returned SHUTDOWN
  grpc::Alarm poke_alarm_;  // after cq_: destroyed first
  std::atomic<bool> poke_pending_{false};
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::thread> threads_;
  std::atomic<bool> shutting_down_{false};
  bool started_ = false;
  bool stopped_ = false;
  bool cq_closed_ = false;  // mu_: no operation may start on cq_ any more

  std::mutex mu_;  // calls_ and every call's outgoing state
  std::unordered_map<uint64_t, Call*> calls_;
  uint64_t next_id_ = 1;

  std::mutex ev_mu_;
  std::condition_variable ev_cv_;
  std::vector<Event> events_;
  bool signalled_ = false;
  using Clock = std::chrono::steady_clock;
  Clock::duration coalesce_{};
  Clock::time_point last_drain_{};
  bool deferred_ = false;  // events wait, their signal is due at last_drain_ + coalesce_
  size_t last_batch_ = 0;  // events the last Drain took
  int efd_ = -1;
  Stats stats_;
};

}  // namespace front
