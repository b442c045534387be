// See front.h.
#include "front.h"

#include <grpc/support/time.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace front {

namespace {
enum TagKind : int { kTagNew = 0, kTagRead, kTagWrite, kTagFinish, kTagDone };
}  // namespace

class Call;

struct Tag {
  Call* call;
  int kind;
};

namespace {
// The tag of Poke's alarm (no call).
Tag poke_tag{nullptr, 0};
}  // namespace

class Call {
 public:
  explicit Call(Front* f) : stream(&ctx) {
    for (int i = 0; i < 5; i++) tags[i] = Tag{this, i};
    (void)f;
  }
  grpc::GenericServerContext ctx;
  grpc::GenericServerAsyncReaderWriter stream;
  grpc::ByteBuffer rbuf;
  grpc::ByteBuffer wbuf;
  Tag tags[5];
  uint64_t id = 0;
  int method = -1;
  bool bidi = false;
  // every field below: Front::mu_
  int outstanding = 0;  // operations whose tag has not come back
  bool writing = false;
  bool finishing = false;  // Finish (or WriteAndFinish) started
  bool done = false;       // the done tag came back
  bool broken = false;     // a write failed: nothing more is sent
  bool announced = false;  // its kNewCall was emitted: the owner knows it
  std::deque<Op> out;
};

namespace {

grpc::ByteBuffer ToBuffer(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

std::string FromBuffer(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!b.Dump(&slices).ok()) return out;
  size_t n = 0;
  for (auto& s : slices) n += s.size();
  out.reserve(n);
  for (auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

double Remaining(const grpc::ServerContext& ctx) {
  gpr_timespec d = ctx.raw_deadline();
  if (gpr_time_cmp(d, gpr_inf_future(d.clock_type)) == 0) return -1;
  gpr_timespec now = gpr_now(d.clock_type);
  gpr_timespec left = gpr_time_sub(d, now);
  double s = static_cast<double>(left.tv_sec) + left.tv_nsec / 1e9;
  return s < 0 ? 0 : s;
}

}  // namespace

Front::Front(std::vector<std::string> methods, std::vector<bool> bidi,
             int max_message, bool reuseport, int coalesce_us)
    : methods_(std::move(methods)),
      bidi_(std::move(bidi)),
      max_message_(max_message),
      reuseport_(reuseport),
      coalesce_(std::chrono::microseconds(coalesce_us > 0 ? coalesce_us : 0)) {
  bidi_.resize(methods_.size(), false);
  for (size_t i = 0; i < methods_.size(); i++) index_[methods_[i]] = static_cast<int>(i);
  efd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

Front::~Front() {
  Shutdown(0);
  if (efd_ >= 0) close(efd_);
}

void Front::AddPort(const std::string& address, const std::string& key_pem,
                    const std::string& cert_pem) {
  addresses_.push_back(Port{address, key_pem, cert_pem});
}

bool Front::Start(int threads) {
  grpc::ServerBuilder builder;
  bound_.assign(addresses_.size(), 0);
  for (size_t i = 0; i < addresses_.size(); i++) {
    const Port& p = addresses_[i];
    std::shared_ptr<grpc::ServerCredentials> creds;
    if (p.key_pem.empty()) {
      creds = grpc::InsecureServerCredentials();
    } else {
      grpc::SslServerCredentialsOptions ssl;
      ssl.pem_key_cert_pairs.push_back({p.key_pem, p.cert_pem});
      creds = grpc::SslServerCredentials(ssl);
    }
    builder.AddListeningPort(p.address, creds, &bound_[i]);
  }
  builder.SetMaxReceiveMessageSize(max_message_);
  builder.SetMaxSendMessageSize(max_message_);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, reuseport_ ? 1 : 0);
  builder.RegisterAsyncGenericService(&service_);
  cq_ = builder.AddCompletionQueue();
  server_ = builder.BuildAndStart();
  if (!server_) return false;
  for (int p : bound_)
    if (p == 0) {
      server_->Shutdown();
      cq_->Shutdown();
      void* tag;
      bool ok;
      while (cq_->Next(&tag, &ok)) {
      }
      server_.reset();
      return false;
    }
  started_ = true;
  poll_mode_ = threads < 1;
  // Enough calls waiting to be accepted for a burst of new calls.
  for (int i = 0; i < 16 * (poll_mode_ ? 1 : threads); i++) Spawn();
  for (int i = 0; i < threads; i++) threads_.emplace_back([this] { Serve(); });
  return true;
}

void Front::Shutdown(double grace_s) {
  if (!started_ || stopped_) return;
  stopped_ = true;
  shutting_down_ = true;
  // Calls in flight may still be answered during the grace period.
  server_->Shutdown(std::chrono::system_clock::now() +
                    std::chrono::microseconds(static_cast<int64_t>(grace_s * 1e6)));
  {
    std::lock_guard<std::mutex> g(mu_);
    cq_closed_ = true;
  }
  cq_->Shutdown();
  for (auto& t : threads_) t.join();
  threads_.clear();
  if (poll_mode_) {
    // No thread of ours takes what is left: this one does (beside a Poll
    // of the owner's, if one is in progress), then waits for that Poll.
    void* tag;
    bool ok;
    while (cq_->Next(&tag, &ok)) Dispatch(tag, ok);
    std::lock_guard<std::mutex> p(poll_mu_);
    cq_drained_ = true;
  }
  std::lock_guard<std::mutex> g(mu_);
  for (auto& kv : calls_) delete kv.second;
  calls_.clear();
}

void Front::Spawn() {
  Call* c = new Call(this);
  c->ctx.AsyncNotifyWhenDone(&c->tags[kTagDone]);
  service_.RequestCall(&c->ctx, &c->stream, cq_.get(), cq_.get(), &c->tags[kTagNew]);
}

void Front::Serve() {
  void* tag;
  bool ok;
  for (;;) {
    bool deferred;
    Clock::time_point due;
    {
      std::lock_guard<std::mutex> g(ev_mu_);
      deferred = deferred_;
      due = last_drain_ + coalesce_;
    }
    grpc::CompletionQueue::NextStatus st;
    if (deferred) {
      auto left = due - Clock::now();
      if (left <= Clock::duration::zero()) {
        SignalIfDue();
        continue;
      }
      st = cq_->AsyncNext(
          &tag, &ok,
          std::chrono::system_clock::now() +
              std::chrono::duration_cast<std::chrono::system_clock::duration>(left));
    } else {
      st = cq_->AsyncNext(&tag, &ok, gpr_inf_future(GPR_CLOCK_REALTIME));
    }
    if (st == grpc::CompletionQueue::SHUTDOWN) break;
    if (st == grpc::CompletionQueue::GOT_EVENT) Dispatch(tag, ok);
    SignalIfDue();
  }
}

bool Front::Poll(double timeout_s) {
  {
    std::unique_lock<std::mutex> p(poll_mu_);
    if (poll_mode_ && !cq_drained_ && started_) {
      // gRPC rounds a deadline up to the next millisecond: one of "now"
      // (the owner's loop has callbacks ready: timeout 0) would wait up to
      // 1 ms for nothing, once per loop iteration. A deadline already past
      // takes only what is ready.
      gpr_timespec deadline =
          timeout_s < 0 ? gpr_inf_future(GPR_CLOCK_MONOTONIC)
          : timeout_s == 0
              ? gpr_inf_past(GPR_CLOCK_MONOTONIC)
              : gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                             gpr_time_from_micros(static_cast<int64_t>(timeout_s * 1e6),
                                                  GPR_TIMESPAN));
      {
        std::lock_guard<std::mutex> g(ev_mu_);
        if (!events_.empty()) deadline = gpr_inf_past(GPR_CLOCK_MONOTONIC);
      }
      void* tag;
      bool ok;
      // The first event as it comes; then what is ready now, a bounded
      // number, so that the owner's loop gets its turn.
      for (int n = 0; n < 512; n++) {
        auto st = cq_->AsyncNext(&tag, &ok, deadline);
        if (st == grpc::CompletionQueue::SHUTDOWN) {
          cq_drained_ = true;
          break;
        }
        if (st == grpc::CompletionQueue::TIMEOUT) break;
        Dispatch(tag, ok);
        deadline = gpr_inf_past(GPR_CLOCK_MONOTONIC);
      }
    } else if (timeout_s > 0) {
      // Nothing to poll (stopped): the owner's loop still waits its time.
      p.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(
          static_cast<int64_t>(std::min(timeout_s, 0.05) * 1e6)));
    }
  }
  std::lock_guard<std::mutex> g(ev_mu_);
  return !events_.empty();
}

void Front::Poke() {
  if (!poll_mode_ || poke_pending_.load()) return;  // an alarm is set already
  std::lock_guard<std::mutex> g(mu_);
  // No operation may start on cq_ once closed (and the flag stays clear);
  // the alarm is set once until Poll sees its tag (Dispatch clears the flag).
  if (cq_closed_ || !started_ || poke_pending_.exchange(true)) return;
  // A deadline already past: the alarm completes within Set (a deadline of
  // "now" is rounded up to the next millisecond and waits for gRPC's timers).
  poke_alarm_.Set(cq_.get(), gpr_inf_past(GPR_CLOCK_MONOTONIC), &poke_tag);
}

void Front::Signal() {
  uint64_t one = 1;
  ssize_t n = write(efd_, &one, sizeof one);
  (void)n;
  ev_cv_.notify_all();
}

void Front::SignalIfDue() {
  {
    std::lock_guard<std::mutex> g(ev_mu_);
    if (!deferred_ || signalled_ || Clock::now() < last_drain_ + coalesce_) return;
    deferred_ = false;
    signalled_ = true;
  }
  Signal();
}

void Front::Emit(Event&& ev) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> g(ev_mu_);
    events_.push_back(std::move(ev));
    stats_.events++;
    if (poll_mode_) {  // Poll says so to the thread that called it
      ev_cv_.notify_all();
      return;
    }
    if (!signalled_) {
      if (coalesce_ <= Clock::duration::zero() || last_batch_ < 2 ||
          Clock::now() - last_drain_ >= coalesce_) {
        signalled_ = wake = true;
        deferred_ = false;
      } else {
        deferred_ = true;  // Serve signals at last_drain_ + coalesce_
      }
    }
  }
  if (wake) Signal();
}

void Front::Dispatch(void* tag, bool ok) {
  Tag* t = static_cast<Tag*>(tag);
  if (t->call == nullptr) {
    poke_pending_ = false;  // Poke's alarm
  } else {
    Handle(t->call, t->kind, ok);
  }
}

void Front::Handle(Call* c, int kind, bool ok) {
  if (kind == kTagNew) {
    if (!ok) {
      // The server is shutting down: this call never started (its done tag
      // may never come); it is freed here.
      delete c;
      return;
    }
    std::unique_lock<std::mutex> g(mu_);
    if (!shutting_down_ && !cq_closed_) Spawn();
    c->id = next_id_++;
    calls_[c->id] = c;
    stats_.calls++;
    c->outstanding = 1;  // the done tag
    auto it = index_.find(c->ctx.method());
    if (cq_closed_) return;  // freed by Shutdown
    if (it == index_.end()) {
      c->finishing = true;
      c->outstanding++;
      c->stream.Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                    "unknown method " + c->ctx.method()),
                       &c->tags[kTagFinish]);
      return;
    }
    c->method = it->second;
    c->bidi = bidi_[c->method];
    c->outstanding++;
    c->stream.Read(&c->rbuf, &c->tags[kTagRead]);
    if (c->bidi) {
      c->announced = true;
      g.unlock();
      Event ev;
      ev.kind = kNewCall;
      ev.id = c->id;
      ev.method = c->method;
      for (auto& kv : c->ctx.client_metadata())
        ev.metadata.emplace_back(std::string(kv.first.data(), kv.first.size()),
                                 std::string(kv.second.data(), kv.second.size()));
      ev.peer = c->ctx.peer();
      ev.timeout = Remaining(c->ctx);
      Emit(std::move(ev));
    }
    return;
  }
  std::unique_lock<std::mutex> g(mu_);
  c->outstanding--;
  switch (kind) {
    case kTagRead: {
      if (ok) {
        Event ev;
        ev.id = c->id;
        ev.method = c->method;
        ev.data = FromBuffer(c->rbuf);
        c->rbuf.Clear();
        if (c->bidi) {
          ev.kind = kMessage;
          if (!c->done && !cq_closed_) {
            c->outstanding++;
            c->stream.Read(&c->rbuf, &c->tags[kTagRead]);
          }
        } else {
          ev.kind = kNewCall;
          c->announced = true;
          for (auto& kv : c->ctx.client_metadata())
            ev.metadata.emplace_back(std::string(kv.first.data(), kv.first.size()),
                                     std::string(kv.second.data(), kv.second.size()));
          ev.peer = c->ctx.peer();
          ev.timeout = Remaining(c->ctx);
        }
        g.unlock();
        Emit(std::move(ev));
        return;
      }
      if (c->bidi) {
        g.unlock();
        Event ev;
        ev.kind = kHalfClose;
        ev.id = c->id;
        ev.method = c->method;
        Emit(std::move(ev));
        return;
      }
      // A unary or server-streaming call whose request never came (the
      // client went away): the owner never heard of it; end it here.
      if (!c->finishing && !c->done && !cq_closed_) {
        c->finishing = true;
        c->outstanding++;
        c->stream.Finish(grpc::Status(grpc::StatusCode::CANCELLED, "no request"),
                         &c->tags[kTagFinish]);
      }
      break;
    }
    case kTagWrite:
      c->writing = false;
      if (!ok) {
        c->broken = true;
        c->out.clear();
      }
      StartNext(c);
      break;
    case kTagFinish:
      break;
    case kTagDone: {
      c->done = true;
      // A call the owner knows of (its NEW_CALL was emitted): tell it (one
      // it had finished itself is ignored there).
      if (c->ctx.IsCancelled() && c->announced) {
        Event ev;
        ev.kind = kCancelled;
        ev.id = c->id;
        ev.method = c->method;
        g.unlock();
        Emit(std::move(ev));
        g.lock();
      }
      break;
    }
  }
  MaybeDelete(c);
}

void Front::StartNext(Call* c) {
  if (c->writing || c->finishing || c->out.empty() || cq_closed_) return;
  if (c->done || c->broken) {
    // Nothing reaches the client any more; the status is still given so
    // that the call's resources go.
    c->out.clear();
    if (!c->done) {
      c->finishing = true;
      c->outstanding++;
      c->stream.Finish(grpc::Status(grpc::StatusCode::CANCELLED, "stream broken"),
                       &c->tags[kTagFinish]);
    }
    return;
  }
  Op op = std::move(c->out.front());
  c->out.pop_front();
  if (op.kind == kWrite) {
    c->writing = true;
    c->outstanding++;
    c->wbuf = ToBuffer(op.data);
    // More queued behind it (a receive's batch, then its status): it may
    // wait in gRPC's buffer and leave with them, in fewer socket writes.
    grpc::WriteOptions opts;
    if (!c->out.empty()) opts.set_buffer_hint();
    c->stream.Write(c->wbuf, opts, &c->tags[kTagWrite]);
    return;
  }
  c->finishing = true;
  c->outstanding++;
  grpc::Status st(static_cast<grpc::StatusCode>(op.code), op.message);
  c->out.clear();
  if (op.has_data && op.code == 0) {
    c->wbuf = ToBuffer(op.data);
    c->stream.WriteAndFinish(c->wbuf, grpc::WriteOptions(), st, &c->tags[kTagFinish]);
  } else {
    c->stream.Finish(st, &c->tags[kTagFinish]);
  }
}

void Front::MaybeDelete(Call* c) {
  if (!c->done || c->outstanding > 0) return;
  calls_.erase(c->id);
  delete c;
}

void Front::Submit(std::vector<Op>&& ops) {
  std::lock_guard<std::mutex> g(mu_);
  stats_.submits++;
  stats_.ops += ops.size();
  if (cq_closed_) return;
  for (auto& op : ops) {
    auto it = calls_.find(op.id);
    if (it == calls_.end()) continue;  // ended meanwhile
    Call* c = it->second;
    if (c->finishing) continue;
    c->out.push_back(std::move(op));
    StartNext(c);
  }
}

void Front::Drain(std::vector<Event>* out) {
  if (!poll_mode_) {
    uint64_t n;
    ssize_t r = read(efd_, &n, sizeof n);
    (void)r;
  }
  std::lock_guard<std::mutex> g(ev_mu_);
  stats_.drains++;
  signalled_ = false;
  deferred_ = false;  // what waited is taken now
  if (coalesce_ > Clock::duration::zero()) last_drain_ = Clock::now();
  last_batch_ = events_.size();
  if (out->empty()) {
    out->swap(events_);
  } else {
    for (auto& e : events_) out->push_back(std::move(e));
    events_.clear();
  }
}

bool Front::Wait(double timeout_s) {
  std::unique_lock<std::mutex> g(ev_mu_);
  return ev_cv_.wait_for(g, std::chrono::microseconds(static_cast<int64_t>(timeout_s * 1e6)),
                         [this] { return !events_.empty(); });
}

Stats Front::stats() {
  std::lock_guard<std::mutex> g0(mu_);
  std::lock_guard<std::mutex> g(ev_mu_);
  return stats_;
}

size_t Front::live_calls() {
  std::lock_guard<std::mutex> g(mu_);
  return calls_.size();
}

}  // namespace front
