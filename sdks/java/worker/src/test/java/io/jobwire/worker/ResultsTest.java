package io.jobwire.worker;

import static jobwire.v1.WorkerServiceOuterClass.ConnectRequest.MessageCase.HELLO;
import static jobwire.v1.WorkerServiceOuterClass.ConnectRequest.MessageCase.PROGRESS;
import static jobwire.v1.WorkerServiceOuterClass.ConnectRequest.MessageCase.RESULT;
import static jobwire.v1.WorkerServiceOuterClass.ConnectRequest.MessageCase.STARTED;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import jobwire.v1.JobOuterClass.FailureKind;
import jobwire.v1.JobOuterClass.Job;
import jobwire.v1.JobOuterClass.JobState;
import jobwire.v1.WorkerServiceOuterClass.Assignment;
import jobwire.v1.WorkerServiceOuterClass.ConnectResponse;
import jobwire.v1.WorkerServiceOuterClass.Failure;
import jobwire.v1.WorkerServiceOuterClass.Progress;
import jobwire.v1.WorkerServiceOuterClass.Refused;
import jobwire.v1.WorkerServiceOuterClass.RefusedMessage;
import jobwire.v1.WorkerServiceOuterClass.Result;
import jobwire.v1.WorkerServiceOuterClass.ResultAck;
import jobwire.v1.WorkerServiceOuterClass.Welcome;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Results, progress and parents' results: the throttle on a clock moved by hand, and a worker against a scripted broker. */
class ResultsTest {
  private FakeBroker broker;
  private Worker worker;
  private Thread running;
  private final CountDownLatch reported = new CountDownLatch(1);
  private final CountDownLatch go = new CountDownLatch(1);
  private final AtomicReference<List<ParentResult>> parents = new AtomicReference<>();

  @BeforeEach
  void setUp() throws Exception {
    broker = new FakeBroker();
  }

  @AfterEach
  void tearDown() throws Exception {
    go.countDown();
    if (worker != null) {
      worker.shutdown();
    }
    broker.close();
    if (running != null) {
      running.join(TimeUnit.SECONDS.toMillis(FakeBroker.WAIT_SECONDS)); // no worker outlives its test
    }
  }

  @Test
  void theThrottleSendsTheFirstAtOnceThenOneASecondAndTheNewestAlways() {
    ProgressThrottle<String> t = new ProgressThrottle<>(1_000);
    assertEquals(new ProgressThrottle.Offer<>("a", ProgressThrottle.Offer.NONE), t.offer(10_000, "a"));
    assertEquals(new ProgressThrottle.Offer<String>(null, 11_000), t.offer(10_200, "b"));
    assertFalse(t.offer(10_500, "c").any());
    assertEquals("c", t.due(11_000));
    assertNull(t.due(11_000));
    assertEquals("d", t.offer(12_500, "d").send());
    t.offer(12_600, "e");
    assertEquals("e", t.close()); // the result goes next: e right before it
    assertNull(t.due(13_500));
    assertNull(t.close());
    assertFalse(t.offer(20_000, "f").any());
  }

  @Test
  void aFractionOutsideZeroToOneIsRefusedAndALongMessageIsCutAtACharacter() {
    JobContext ctx = new JobContext(Assignment.getDefaultInstance());
    for (double bad : new double[] {-0.1, 1.5, Double.NaN}) {
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ctx.progress(bad));
      assertTrue(e.getMessage().contains("is not between 0 and 1"), e.getMessage());
    }
    assertEquals("short", JobContext.clip("short"));
    assertEquals("é".repeat(128), JobContext.clip("é".repeat(200)));
    assertEquals("a" + "é".repeat(127), JobContext.clip("a" + "é".repeat(200)));
  }

  @Test
  void aResultValueWithoutAnEncoderIsFatal() {
    JobContext ctx = new JobContext(Assignment.getDefaultInstance());
    ResultException e = assertThrows(ResultException.class, () -> ctx.setResultValue(List.of(1)));
    assertTrue(e.getMessage().contains("resultEncoder"), e.getMessage());
    Failure f = Failures.of(e);
    assertEquals(List.of(FailureKind.FAILURE_KIND_FATAL, "io.jobwire.worker.ResultException"), List.of(f.getKind(), f.getErrorType()));
  }

  private void start(Worker.Builder b) {
    worker = b.address(broker.address())
        .workerId("w1")
        .capacity(2)
        .backoff(new Backoff(Duration.ofMillis(10), Duration.ofMillis(50), () -> 0.5))
        .gracePeriod(Duration.ofMillis(100))
        .finishTimeout(Duration.ofMillis(100))
        .resultEncoder(v -> {
          if (v instanceof Thread) {
            throw new java.io.IOException("a thread has no JSON");
          }
          return ("<" + v + ">").getBytes(StandardCharsets.UTF_8);
        })
        .build();
    worker.handle("bytes", ctx -> ctx.setResult(ctx.payload()));
    worker.handle("text", ctx -> ctx.setResultText(ctx.payloadText()));
    worker.handle("value", ctx -> ctx.setResultValue(List.of(1, 2)));
    worker.handle("unencodable", ctx -> ctx.setResultValue(Thread.currentThread()));
    worker.handle("none", ctx -> {});
    worker.handle("parents", ctx -> parents.set(ctx.parentResults()));
    worker.handle("steps", ctx -> {
      for (int i = 1; i <= 5; i++) {
        ctx.progress(i / 5.0, "step " + i);
      }
      reported.countDown();
      go.await();
      ctx.progress("late"); // held back within the interval: it goes right before the result
      ctx.setResultText("done");
    });
    running = new Thread(() -> {
      try {
        worker.run();
      } catch (Exception e) {
        // the test's assertions say what went wrong
      }
    });
    running.setDaemon(true);
    running.start();
  }

  private FakeBroker.Stream connect(int maxResultBytes) throws InterruptedException {
    FakeBroker.Stream s = broker.accept();
    s.recv(HELLO);
    s.send(ConnectResponse.newBuilder()
        .setWelcome(Welcome.newBuilder()
            .setSessionId("s")
            .setLeaseDuration(Failures.toProto(Duration.ofMinutes(1)))
            .setHeartbeatInterval(Failures.toProto(Duration.ofMinutes(1)))
            .setMaxResultBytes(maxResultBytes))
        .build());
    return s;
  }

  private static Result run(FakeBroker.Stream s, long id, String type, String payload) throws InterruptedException {
    s.assign(id, type, payload, id + ".a");
    s.recv(STARTED);
    Result r = s.recv(RESULT).getResult();
    s.send(ConnectResponse.newBuilder().setResultAck(ResultAck.newBuilder().setJobId(id).setLeaseToken(id + ".a")).build());
    return r;
  }

  @Test
  void theResultSetByTheHandlerIsSentAndOneOverTheBrokersLimitIsAFatalResultTooLarge() throws Exception {
    start(Worker.builder());
    FakeBroker.Stream s = connect(8);
    assertEquals(ByteString.copyFromUtf8("12345678"), run(s, 1, "bytes", "12345678").getSuccess().getResult());
    assertEquals(ByteString.copyFromUtf8("é"), run(s, 2, "text", "é").getSuccess().getResult());
    assertEquals(ByteString.copyFromUtf8("<[1, 2]>"), run(s, 3, "value", "").getSuccess().getResult());
    Result none = run(s, 4, "none", "");
    assertTrue(none.hasSuccess());
    assertTrue(none.getSuccess().getResult().isEmpty());
    Failure f = run(s, 5, "bytes", "123456789").getFailure();
    assertEquals(FailureKind.FAILURE_KIND_FATAL, f.getKind());
    assertEquals("ResultTooLarge", f.getErrorType());
    assertTrue(f.getMessage().contains("is 9 bytes, more than the broker's limit of 8 bytes"), f.getMessage());
    Failure u = run(s, 6, "unencodable", "").getFailure();
    assertEquals(FailureKind.FAILURE_KIND_FATAL, u.getKind(), "a value the encoder refused is FATAL");
    assertEquals(List.of("java.io.IOException", "a thread has no JSON"), List.of(u.getErrorType(), u.getMessage()));
  }

  @Test
  void theHandlerReadsItsParentsResultsInOrder() throws Exception {
    start(Worker.builder());
    FakeBroker.Stream s = connect(0);
    s.assign(Assignment.newBuilder()
        .setJob(Job.newBuilder().setId(9).setType("parents"))
        .setAttempt(1)
        .setLeaseToken("9.a")
        .addParentResults(jobwire.v1.WorkerServiceOuterClass.ParentResult.newBuilder()
            .setJobId(7).setType("fetch").setResult(ByteString.copyFromUtf8("rows")).setState(JobState.JOB_STATE_SUCCEEDED))
        .addParentResults(jobwire.v1.WorkerServiceOuterClass.ParentResult.newBuilder()
            .setJobId(8).setType("fetch").setState(JobState.JOB_STATE_CANCELLED))
        .build());
    s.recv(STARTED);
    assertTrue(s.recv(RESULT).getResult().hasSuccess());
    List<ParentResult> got = parents.get();
    assertEquals(2, got.size());
    assertEquals(List.of(7L, 8L), got.stream().map(ParentResult::jobId).toList());
    assertEquals("rows", got.get(0).resultText());
    assertEquals(JobState.JOB_STATE_SUCCEEDED, got.get(0).state());
    assertEquals("", got.get(1).resultText());
    assertEquals(JobState.JOB_STATE_CANCELLED, got.get(1).state());
  }

  @Test
  void progressIsThrottledOnTheWorkersClockAndTheLastOneIsSent() throws Exception {
    AtomicLong now = new AtomicLong(1_000_000_000_000L);
    // The throttle's clock is moved by hand; the flush of a held-back report waits 200 ms, far
    // longer than the handler takes to report five times.
    start(Worker.builder().nanoClock(now::get).progressInterval(Duration.ofMillis(200)));
    FakeBroker.Stream s = connect(0);
    s.assign(1, "steps", "", "1.a");
    s.recv(STARTED);
    Progress first = s.recv(PROGRESS).getProgress();
    assertEquals(List.of(1L, "1.a", 0.2, "step 1"), List.of(first.getJobId(), first.getLeaseToken(), first.getFraction(), first.getMessage()));
    assertTrue(reported.await(FakeBroker.WAIT_SECONDS, TimeUnit.SECONDS));
    now.addAndGet(Duration.ofMillis(200).toNanos());
    Progress last = s.recv(PROGRESS).getProgress();
    assertEquals(List.of(1.0, "step 5"), List.of(last.getFraction(), last.getMessage()));
  }

  @Test
  void progressHeldBackGoesRightBeforeTheResult() throws Exception {
    // A clock that never moves and an interval longer than the test: "late" waits for a flush.
    start(Worker.builder().nanoClock(() -> 0L).progressInterval(Duration.ofHours(1)));
    FakeBroker.Stream s = connect(0);
    s.assign(1, "steps", "", "1.a");
    s.recv(STARTED);
    assertEquals("step 1", s.recv(PROGRESS).getProgress().getMessage());
    assertTrue(reported.await(FakeBroker.WAIT_SECONDS, TimeUnit.SECONDS));
    go.countDown();
    Progress last = s.recv(PROGRESS).getProgress();
    assertEquals("late", last.getMessage());
    assertFalse(last.hasFraction(), "a message alone carries no fraction");
    assertEquals(ByteString.copyFromUtf8("done"), s.recv(RESULT).getResult().getSuccess().getResult());
  }

  @Test
  void aProgressReportTheBrokerRefusedAsInvalidLeavesTheJobRunning() throws Exception {
    start(Worker.builder().nanoClock(() -> 0L).progressInterval(Duration.ofHours(1)));
    FakeBroker.Stream s = connect(0);
    s.assign(1, "steps", "", "1.a");
    s.recv(STARTED);
    s.recv(PROGRESS);
    s.send(ConnectResponse.newBuilder()
        .setRefused(Refused.newBuilder()
            .setJobId(1)
            .setLeaseToken("1.a")
            .setRefusedMessage(RefusedMessage.REFUSED_MESSAGE_PROGRESS)
            .setCode(3) // INVALID_ARGUMENT: the report broke a rule
            .setMessage("scripted"))
        .build());
    run(s, 2, "none", ""); // read after the refusal: once it ran, the refusal was handled
    go.countDown();
    s.recv(PROGRESS);
    assertEquals(ByteString.copyFromUtf8("done"), s.recv(RESULT).getResult().getSuccess().getResult(), "the job ran on to its result");
  }
}
