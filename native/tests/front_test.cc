// front::Front driven by a real gRPC C++ client (GenericStub) over a socket:
// the owner's side (Drain/Submit) is played by the test.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <poll.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "front.h"

namespace {

const char* kUnary = "/t.S/Unary";
const char* kStream = "/t.S/Stream";
const char* kBidi = "/t.S/Bidi";

grpc::ByteBuffer Buf(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

std::string Str(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(b.Dump(&slices).ok());
  std::string out;
  for (auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// Each case twice: with a completion-queue thread of the front's own
// (param 1), and with none (0), the owner's thread polling (played here by
// a thread calling Poll in a loop, as the event loop's selector does).
class FrontTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    front_ = std::make_unique<front::Front>(
        std::vector<std::string>{kUnary, kStream, kBidi},
        std::vector<bool>{false, false, true}, 1 << 20, false);
    front_->AddPort("127.0.0.1:0");
    ASSERT_TRUE(front_->Start(GetParam()));
    EXPECT_EQ(front_->polling(), GetParam() == 0);
    if (GetParam() == 0)
      poller_ = std::thread([this] {
        while (!stop_) front_->Poll(0.02);
      });
    port_ = front_->BoundPorts()[0];
    ASSERT_GT(port_, 0);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                   grpc::InsecureChannelCredentials());
    stub_ = std::make_unique<grpc::GenericStub>(channel_);
  }
  void TearDown() override {
    front_->Shutdown(0);
    stop_ = true;
    if (poller_.joinable()) poller_.join();
  }

  // The next `n` events (fails after 5 s).
  std::vector<front::Event> Events(size_t n) {
    std::vector<front::Event> out;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (out.size() < n && std::chrono::steady_clock::now() < end) {
      front_->Wait(0.1);
      front_->Drain(&out);
    }
    EXPECT_EQ(out.size(), n);
    return out;
  }

  static front::Op Op(uint64_t id, int kind, const std::string* data, int code = 0,
                      const std::string& msg = "") {
    front::Op op;
    op.id = id;
    op.kind = kind;
    if (data) {
      op.has_data = true;
      op.data = *data;
    }
    op.code = code;
    op.message = msg;
    return op;
  }

  void* Next(grpc::CompletionQueue* cq, bool* ok) {
    void* tag = nullptr;
    auto r = cq->AsyncNext(&tag, ok, std::chrono::system_clock::now() + std::chrono::seconds(5));
    EXPECT_EQ(r, grpc::CompletionQueue::GOT_EVENT);
    return tag;
  }

  std::unique_ptr<front::Front> front_;
  std::thread poller_;
  std::atomic<bool> stop_{false};
  int port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::GenericStub> stub_;
};

TEST_P(FrontTest, UnaryCallsAreAnsweredInOneBatch) {
  const int n = 8;
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<grpc::ClientContext>> ctxs;
  std::vector<std::unique_ptr<grpc::GenericClientAsyncResponseReader>> rpcs;
  std::vector<grpc::ByteBuffer> resp(n);
  std::vector<grpc::Status> st(n);
  for (int i = 0; i < n; i++) {
    ctxs.push_back(std::make_unique<grpc::ClientContext>());
    ctxs[i]->AddMetadata("x-mq-client-id", "client-" + std::to_string(i));
    ctxs[i]->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    rpcs.push_back(stub_->PrepareUnaryCall(ctxs[i].get(), kUnary, Buf("req" + std::to_string(i)), &cq));
    rpcs[i]->StartCall();
    rpcs[i]->Finish(&resp[i], &st[i], reinterpret_cast<void*>(static_cast<intptr_t>(i + 1)));
  }
  auto events = Events(n);
  std::vector<front::Op> ops;
  for (auto& e : events) {
    EXPECT_EQ(e.kind, front::kNewCall);
    EXPECT_EQ(e.method, 0);
    EXPECT_EQ(e.data.substr(0, 3), "req");
    EXPECT_GT(e.timeout, 25);
    // gRPC rounds a timeout up on the wire (grpc-timeout: 30 s arrives as
    // up to 30.1 s)
    EXPECT_LE(e.timeout, 30.2);
    EXPECT_EQ(e.peer.rfind("ipv4:127.0.0.1:", 0), 0u) << e.peer;
    std::string who;
    for (auto& kv : e.metadata)
      if (kv.first == "x-mq-client-id") who = kv.second;
    EXPECT_EQ(who, "client-" + e.data.substr(3));
    std::string answer = "ans" + e.data.substr(3);
    ops.push_back(Op(e.id, front::kFinish, &answer));
  }
  front_->Submit(std::move(ops));  // every answer in one hand-over
  for (int i = 0; i < n; i++) {
    bool ok;
    auto tag = reinterpret_cast<intptr_t>(Next(&cq, &ok));
    ASSERT_TRUE(ok);
    int k = static_cast<int>(tag) - 1;
    EXPECT_TRUE(st[k].ok()) << st[k].error_message();
    EXPECT_EQ(Str(resp[k]), "ans" + std::to_string(k));
  }
  EXPECT_EQ(front_->stats().submits, 1u);
}

TEST_P(FrontTest, AStatusReachesTheClient) {
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  auto rpc = stub_->PrepareUnaryCall(&ctx, kUnary, Buf("x"), &cq);
  rpc->StartCall();
  grpc::ByteBuffer resp;
  grpc::Status st;
  rpc->Finish(&resp, &st, reinterpret_cast<void*>(1));
  auto ev = Events(1);
  EXPECT_LT(ev[0].timeout, 0);  // no deadline
  std::vector<front::Op> ops{Op(ev[0].id, front::kFinish, nullptr, 3, "bad thing")};
  front_->Submit(std::move(ops));
  bool ok;
  Next(&cq, &ok);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(st.error_message(), "bad thing");
}

TEST_P(FrontTest, UnknownMethodIsUnimplementedWithoutTheOwner) {
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  auto rpc = stub_->PrepareUnaryCall(&ctx, "/t.S/Nope", Buf("x"), &cq);
  rpc->StartCall();
  grpc::ByteBuffer resp;
  grpc::Status st;
  rpc->Finish(&resp, &st, reinterpret_cast<void*>(1));
  bool ok;
  Next(&cq, &ok);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  std::vector<front::Event> none;
  front_->Drain(&none);
  EXPECT_TRUE(none.empty());
}

TEST_P(FrontTest, ServerStreamWritesInOrderThenEnds) {
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  auto call = stub_->PrepareCall(&ctx, kStream, &cq);
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  Next(&cq, &ok);
  ASSERT_TRUE(ok);
  call->Write(Buf("poll"), reinterpret_cast<void*>(2));
  Next(&cq, &ok);
  call->WritesDone(reinterpret_cast<void*>(3));
  Next(&cq, &ok);
  auto ev = Events(1);
  EXPECT_EQ(ev[0].method, 1);
  EXPECT_EQ(ev[0].data, "poll");
  std::vector<front::Op> ops;
  std::vector<std::string> parts{"a", "b", "c"};
  for (auto& p : parts) ops.push_back(Op(ev[0].id, front::kWrite, &p));
  ops.push_back(Op(ev[0].id, front::kFinish, nullptr));
  front_->Submit(std::move(ops));
  std::vector<std::string> got;
  for (;;) {
    grpc::ByteBuffer b;
    call->Read(&b, reinterpret_cast<void*>(4));
    Next(&cq, &ok);
    if (!ok) break;
    got.push_back(Str(b));
  }
  EXPECT_EQ(got, parts);
  grpc::Status st;
  call->Finish(&st, reinterpret_cast<void*>(5));
  Next(&cq, &ok);
  EXPECT_TRUE(st.ok());
}

TEST_P(FrontTest, BidiMessagesBothWaysAndHalfClose) {
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-mq-client-id", "tele");
  auto call = stub_->PrepareCall(&ctx, kBidi, &cq);
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  Next(&cq, &ok);
  auto opened = Events(1);
  EXPECT_EQ(opened[0].kind, front::kNewCall);
  EXPECT_EQ(opened[0].method, 2);
  EXPECT_TRUE(opened[0].data.empty());
  uint64_t id = opened[0].id;
  call->Write(Buf("settings"), reinterpret_cast<void*>(2));
  Next(&cq, &ok);
  call->Write(Buf("heartbeat"), reinterpret_cast<void*>(2));
  Next(&cq, &ok);
  auto msgs = Events(2);
  EXPECT_EQ(msgs[0].kind, front::kMessage);
  EXPECT_EQ(msgs[0].data, "settings");
  EXPECT_EQ(msgs[1].data, "heartbeat");
  // A push from the server, not an answer to anything (a check-back).
  std::string push = "check";
  std::vector<front::Op> ops{Op(id, front::kWrite, &push)};
  front_->Submit(std::move(ops));
  grpc::ByteBuffer b;
  call->Read(&b, reinterpret_cast<void*>(3));
  Next(&cq, &ok);
  ASSERT_TRUE(ok);
  EXPECT_EQ(Str(b), "check");
  call->WritesDone(reinterpret_cast<void*>(4));
  Next(&cq, &ok);
  auto closed = Events(1);
  EXPECT_EQ(closed[0].kind, front::kHalfClose);
  std::vector<front::Op> fin{Op(id, front::kFinish, nullptr)};
  front_->Submit(std::move(fin));
  grpc::Status st;
  call->Finish(&st, reinterpret_cast<void*>(5));
  Next(&cq, &ok);
  EXPECT_TRUE(st.ok());
}

TEST_P(FrontTest, ClientCancelReachesTheOwnerAndTheCallIsFreed) {
  grpc::CompletionQueue cq;
  auto ctx = std::make_unique<grpc::ClientContext>();
  auto rpc = stub_->PrepareUnaryCall(ctx.get(), kUnary, Buf("wait"), &cq);
  rpc->StartCall();
  grpc::ByteBuffer resp;
  grpc::Status st;
  rpc->Finish(&resp, &st, reinterpret_cast<void*>(1));
  auto ev = Events(1);
  EXPECT_EQ(front_->live_calls(), 1u);
  ctx->TryCancel();
  bool ok;
  Next(&cq, &ok);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::CANCELLED);
  auto cancelled = Events(1);
  EXPECT_EQ(cancelled[0].kind, front::kCancelled);
  EXPECT_EQ(cancelled[0].id, ev[0].id);
  // An answer that comes too late is dropped, and nothing is left behind.
  std::string late = "late";
  std::vector<front::Op> ops{Op(ev[0].id, front::kFinish, &late)};
  front_->Submit(std::move(ops));
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (front_->live_calls() != 0 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(front_->live_calls(), 0u);
}

TEST_P(FrontTest, DeadlinePassingIsACancellation) {
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
  auto rpc = stub_->PrepareUnaryCall(&ctx, kUnary, Buf("slow"), &cq);
  rpc->StartCall();
  grpc::ByteBuffer resp;
  grpc::Status st;
  rpc->Finish(&resp, &st, reinterpret_cast<void*>(1));
  auto ev = Events(1);
  auto cancelled = Events(1);
  EXPECT_EQ(cancelled[0].kind, front::kCancelled);
  bool ok;
  Next(&cq, &ok);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
}

TEST_P(FrontTest, OversizedRequestIsRefusedByGrpc) {
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  auto rpc = stub_->PrepareUnaryCall(&ctx, kUnary, Buf(std::string(2 << 20, 'x')), &cq);
  rpc->StartCall();
  grpc::ByteBuffer resp;
  grpc::Status st;
  rpc->Finish(&resp, &st, reinterpret_cast<void*>(1));
  bool ok;
  Next(&cq, &ok);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Threads, FrontTest, ::testing::Values(1, 0),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return p.param ? std::string("OwnThread") : std::string("OwnerPolls");
                         });

// One unary call with request "q", answered "a", served by nothing but
// Poll(poll_s) on this thread; then freed once its done tag was polled.
static void ServeOneCallByPolling(front::Front& f, double poll_s) {
  using ms = std::chrono::milliseconds;
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(f.BoundPorts()[0]),
                                     grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  grpc::ByteBuffer resp;
  grpc::Status st;
  auto rpc = stub.PrepareUnaryCall(&ctx, kUnary, Buf("q"), &cq);
  rpc->StartCall();
  rpc->Finish(&resp, &st, reinterpret_cast<void*>(1));
  std::vector<front::Event> got;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (got.empty() && std::chrono::steady_clock::now() < end) {
    if (f.Poll(poll_s)) f.Drain(&got);
    if (poll_s == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].data, "q");
  EXPECT_FALSE(f.Poll(0.0));  // taken
  front::Op op;
  op.id = got[0].id;
  op.kind = front::kFinish;
  op.has_data = true;
  op.data = "a";
  std::vector<front::Op> ops;
  ops.push_back(std::move(op));
  f.Submit(std::move(ops));
  void* tag = nullptr;
  bool ok = false;
  bool answered = false;
  end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!answered && std::chrono::steady_clock::now() < end) {
    f.Poll(poll_s);  // the call's own completions come back to this thread
    answered = cq.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + ms(1)) ==
               grpc::CompletionQueue::GOT_EVENT;
  }
  ASSERT_TRUE(answered);
  EXPECT_TRUE(ok);
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(Str(resp), "a");
  end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (f.live_calls() > 0 && std::chrono::steady_clock::now() < end) f.Poll(poll_s);
  EXPECT_EQ(f.live_calls(), 0u);
}

// No thread of the front's own: a call is served by the thread that polls,
// Poll says when calls wait, and Poke (from another thread) ends a Poll
// that would otherwise wait its whole time.
TEST(FrontPoll, TheOwnersThreadServesCallsAndAPokeEndsAPoll) {
  front::Front f({kUnary}, {false}, 1 << 20, false);
  f.AddPort("127.0.0.1:0");
  ASSERT_TRUE(f.Start(0));
  ASSERT_TRUE(f.polling());
  using ms = std::chrono::milliseconds;
  // Nothing to serve: a poke from another thread ends a 5 s poll early.
  auto t0 = std::chrono::steady_clock::now();
  std::thread poker([&] {
    std::this_thread::sleep_for(ms(100));
    f.Poke();
  });
  EXPECT_FALSE(f.Poll(5.0));
  poker.join();
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, ms(90));
  EXPECT_LT(took, ms(2000));
  // A poke before the poll: that poll returns at once.
  f.Poke();
  t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(f.Poll(5.0));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, ms(2000));
  // A call: nobody but this thread polls, and it is served.
  ServeOneCallByPolling(f, 0.01);
  f.Shutdown(0);
  EXPECT_FALSE(f.Poll(0.0));  // after shutdown: nothing, at once
}

// Poll(0), as the owner's loop calls it while callbacks are ready, takes what
// is ready and does not wait: gRPC rounds a deadline up to the next
// millisecond, and one of "now" made every such loop iteration wait ~1 ms
// (a restarted endpoint's sends, which go through the writer thread and back
// in several iterations, took ~9 ms each). It still moves the sockets on: a
// call is served by nothing but Poll(0).
TEST(FrontPoll, APollOfNoTimeDoesNotWaitAndStillServes) {
  front::Front f({kUnary}, {false}, 1 << 20, false);
  f.AddPort("127.0.0.1:0");
  ASSERT_TRUE(f.Start(0));
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 200; i++) EXPECT_FALSE(f.Poll(0.0));
  // 200 waits of a millisecond would take 200 ms or more.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(100));
  ServeOneCallByPolling(f, 0.0);
  f.Shutdown(0);
}

// With coalesce_us: the first call after a quiet spell is signalled at once;
// under load (the last Drain took several calls) calls arriving within
// coalesce_us of it wait for the rest of that time and go in one Drain; after
// a Drain of a single call (a lone client, one call after another) the next
// is signalled at once.
TEST(FrontCoalesce, CallsUnderLoadAreSignalledTogetherALoneClientsAtOnce) {
  front::Front f({kUnary}, {false}, 1 << 20, false, /*coalesce_us=*/300000);
  f.AddPort("127.0.0.1:0");
  ASSERT_TRUE(f.Start(1));
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(f.BoundPorts()[0]),
                                     grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  ASSERT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() +
                                        std::chrono::seconds(5)));
  auto readable = [&](int ms) {
    pollfd p{f.fd(), POLLIN, 0};
    return poll(&p, 1, ms) == 1;
  };
  const int total = 10;
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<grpc::ClientContext>> ctxs;
  std::vector<std::unique_ptr<grpc::GenericClientAsyncResponseReader>> rpcs;
  std::vector<grpc::ByteBuffer> resp(total);
  std::vector<grpc::Status> st(total);
  int made = 0;
  auto call = [&]() {
    int i = made++;
    ctxs.push_back(std::make_unique<grpc::ClientContext>());
    rpcs.push_back(stub.PrepareUnaryCall(ctxs.back().get(), kUnary, Buf("r"), &cq));
    rpcs.back()->StartCall();
    rpcs.back()->Finish(&resp[i], &st[i], reinterpret_cast<void*>(static_cast<intptr_t>(i + 1)));
  };
  std::vector<front::Event> all;
  auto drain = [&]() {
    std::vector<front::Event> got;
    f.Drain(&got);
    for (auto& e : got) all.push_back(e);
    return got.size();
  };
  using ms = std::chrono::milliseconds;
  // A quiet spell, then a burst: signalled at once, and the burst (given
  // time to arrive) taken together.
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; i++) call();
  ASSERT_TRUE(readable(2000));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, ms(250));
  std::this_thread::sleep_for(ms(200));  // the other two arrive meanwhile
  ASSERT_EQ(drain(), 3u);
  ASSERT_FALSE(readable(0));
  // Under load: calls soon after that drain wait for the rest of the window.
  auto drained = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; i++) call();
  EXPECT_FALSE(readable(100));
  ASSERT_TRUE(readable(2000));
  EXPECT_GE(std::chrono::steady_clock::now() - drained, ms(290));
  std::this_thread::sleep_for(ms(20));
  EXPECT_EQ(drain(), 5u);  // one hand-over for all five
  // Quiet again; then a lone client: one call, drained, the next at once.
  std::this_thread::sleep_for(ms(400));
  call();
  ASSERT_TRUE(readable(2000));
  EXPECT_EQ(drain(), 1u);
  auto lone = std::chrono::steady_clock::now();
  call();
  ASSERT_TRUE(readable(2000));
  EXPECT_LT(std::chrono::steady_clock::now() - lone, ms(150));
  EXPECT_EQ(drain(), 1u);
  ASSERT_EQ(made, total);
  std::vector<front::Op> ops;
  for (auto& e : all) {
    front::Op op;
    op.id = e.id;
    op.kind = front::kFinish;
    op.has_data = true;
    op.data = "a";
    ops.push_back(std::move(op));
  }
  f.Submit(std::move(ops));
  for (int i = 0; i < total; i++) {
    void* tag;
    bool ok;
    ASSERT_EQ(cq.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + std::chrono::seconds(5)),
              grpc::CompletionQueue::GOT_EVENT);
    EXPECT_TRUE(ok);
  }
  for (auto& s : st) EXPECT_TRUE(s.ok()) << s.error_message();
  f.Shutdown(0);
}
