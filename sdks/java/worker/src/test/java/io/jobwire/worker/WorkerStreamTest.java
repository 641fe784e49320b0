package io.jobwire.worker;

import static jobwire.v1.WorkerServiceOuterClass.ConnectRequest.MessageCase.DRAIN;
import static jobwire.v1.WorkerServiceOuterClass.ConnectRequest.MessageCase.HEARTBEAT;
import static jobwire.v1.WorkerServiceOuterClass.ConnectRequest.MessageCase.HELLO;
import static jobwire.v1.WorkerServiceOuterClass.ConnectRequest.MessageCase.RELEASE;
import static jobwire.v1.WorkerServiceOuterClass.ConnectRequest.MessageCase.RESULT;
import static jobwire.v1.WorkerServiceOuterClass.ConnectRequest.MessageCase.STARTED;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import jobwire.v1.JobOuterClass.FailureKind;
import jobwire.v1.WorkerServiceOuterClass.Assignment;
import jobwire.v1.WorkerServiceOuterClass.Cancel;

import jobwire.v1.WorkerServiceOuterClass.ConnectRequest;
import jobwire.v1.WorkerServiceOuterClass.ConnectResponse;
import jobwire.v1.WorkerServiceOuterClass.ConnectResponseBatch;
import jobwire.v1.WorkerServiceOuterClass.DrainRequest;
import jobwire.v1.WorkerServiceOuterClass.Failure;
import jobwire.v1.WorkerServiceOuterClass.HeartbeatAck;
import jobwire.v1.WorkerServiceOuterClass.LeaseRef;
import jobwire.v1.WorkerServiceOuterClass.Refused;
import jobwire.v1.WorkerServiceOuterClass.RefusedMessage;
import jobwire.v1.WorkerServiceOuterClass.ResultAck;
import jobwire.v1.JobOuterClass.Job;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Drives a Worker against a scripted broker on loopback. */
class WorkerStreamTest {
  private static final Duration LONG = Duration.ofMinutes(1);

  private FakeBroker broker;
  private Worker worker;
  private CompletableFuture<Throwable> run;
  /** What the handlers saw: cancel reasons, interrupts. */
  private final BlockingQueue<String> seen = new ArrayBlockingQueue<>(100);

  @BeforeEach
  void setUp() throws Exception {
    broker = new FakeBroker();
  }

  @AfterEach
  void tearDown() throws Exception {
    if (run != null && !run.isDone()) {
      worker.shutdown();
    }
    broker.close();
  }

  private Worker.Builder builder() {
    return Worker.builder()
        .address(broker.address())
        .workerId("w1")
        .capacity(2)
        .backoff(new Backoff(Duration.ofMillis(10), Duration.ofMillis(50), () -> 0.5))
        .resendDelay(Duration.ofMillis(10))
        .payloadDecoder(new PayloadDecoder() {
          @Override
          public <T> T decode(byte[] payload, Class<T> type) {
            return type.cast(Integer.valueOf(new String(payload, java.nio.charset.StandardCharsets.UTF_8)));
          }
        });
  }

  /** Starts w.run() on a thread of its own; run completes with what it threw, or null. */
  private void start(Worker w) {
    worker = w;
    w.handle("ok", ctx -> {});
    w.handle("fatal", ctx -> {
      throw new IllegalArgumentException("wrong argument");
    });
    w.handle("number", Integer.class, (ctx, n) -> seen.add("number " + n));
    w.handle("retry", ctx -> {
      throw new RetryAfterException(Duration.ofSeconds(30), new java.io.IOException("429 from the mail API"));
    });
    w.handle("wait", ctx -> {
      seen.add("started " + ctx.id());
      try {
        Thread.sleep(LONG.toMillis());
        seen.add("slept");
      } catch (InterruptedException e) {
        seen.add("interrupted " + ctx.cancelReason().map(CancelReason::label).orElse("?"));
        throw e;
      }
    });
    run = new CompletableFuture<>();
    Thread t = new Thread(() -> {
      try {
        w.run();
        run.complete(null);
      } catch (Throwable e) {
        run.complete(e);
      }
    });
    t.setDaemon(true);
    t.start();
  }

  private FakeBroker.Stream connect() throws InterruptedException {
    return connect(LONG, LONG);
  }

  private FakeBroker.Stream connect(Duration lease, Duration heartbeat) throws InterruptedException {
    FakeBroker.Stream s = broker.accept();
    s.recv(HELLO);
    s.welcome(lease, heartbeat);
    return s;
  }

  private String nextSeen() throws InterruptedException {
    String s = seen.poll(FakeBroker.WAIT_SECONDS, TimeUnit.SECONDS);
    assertTrue(s != null, "the handler reported nothing");
    return s;
  }

  private static ConnectResponse ack(long id, String token) {
    return ConnectResponse.newBuilder().setResultAck(ResultAck.newBuilder().setJobId(id).setLeaseToken(token)).build();
  }

  /** Assigns job id, of type "wait", and waits until its handler runs. */
  private void running(FakeBroker.Stream s, long id) throws InterruptedException {
    s.assign(id, "wait", "", id + ".a");
    s.recv(STARTED);
    assertEquals("started " + id, nextSeen());
  }

  private static ConnectResponse cancel(long id, String token) {
    return ConnectResponse.newBuilder()
        .setCancel(Cancel.newBuilder().setJobId(id).setLeaseToken(token).setReason(jobwire.v1.WorkerServiceOuterClass.CancelReason.CANCEL_REASON_REQUESTED))
        .build();
  }

  private static LeaseRef ref(long id, String token) {
    return LeaseRef.newBuilder().setJobId(id).setLeaseToken(token).build();
  }

  @Test
  void helloDeclaresTheWorkerAndAJobRunsToSuccess() throws Exception {
    start(builder().queues(List.of("mail")).build());
    FakeBroker.Stream s = broker.accept();
    var hello = s.recv(HELLO).getHello();
    assertEquals("w1", hello.getWorkerId());
    assertEquals(List.of("fatal", "number", "ok", "retry", "wait"), hello.getJobTypesList());
    assertEquals(List.of("mail"), hello.getQueuesList());
    assertEquals(2, hello.getCapacity());
    assertTrue(hello.getAcceptsBatches(), "the worker did not announce that it accepts batches");
    s.welcome(LONG, LONG);
    s.assign(7, "ok", "", "7.a");
    assertEquals(ref(7, "7.a").getLeaseToken(), s.recv(STARTED).getStarted().getLeaseToken());
    var result = s.recv(RESULT).getResult();
    assertEquals(7, result.getJobId());
    assertEquals("7.a", result.getLeaseToken());
    assertTrue(result.hasSuccess());
  }

  @Test
  void failuresAreTypedFatalOrTransient() throws Exception {
    start(builder().build());
    FakeBroker.Stream s = connect();
    s.assign(1, "fatal", "", "1.a");
    s.recv(STARTED);
    Failure f = s.recv(RESULT).getResult().getFailure();
    assertEquals(FailureKind.FAILURE_KIND_FATAL, f.getKind());
    assertEquals("java.lang.IllegalArgumentException", f.getErrorType());
    assertEquals("wrong argument", f.getMessage());
    assertTrue(f.getDetails().contains("WorkerStreamTest"), f.getDetails());

    s.assign(2, "retry", "", "2.a");
    s.recv(STARTED);
    f = s.recv(RESULT).getResult().getFailure();
    assertEquals(FailureKind.FAILURE_KIND_TRANSIENT, f.getKind());
    assertEquals("java.io.IOException", f.getErrorType());
    assertEquals(30, f.getRetryAfter().getSeconds());
  }

  @Test
  void aTypedHandlerGetsTheDecodedPayloadAndABadOneIsFatal() throws Exception {
    start(builder().build());
    FakeBroker.Stream s = connect();
    s.assign(1, "number", "42", "1.a");
    s.recv(STARTED);
    assertTrue(s.recv(RESULT).getResult().hasSuccess());
    assertEquals("number 42", nextSeen());

    s.assign(2, "number", "forty-two", "2.a");
    s.recv(STARTED);
    Failure f = s.recv(RESULT).getResult().getFailure();
    assertEquals(FailureKind.FAILURE_KIND_FATAL, f.getKind());
    assertEquals("java.lang.NumberFormatException", f.getErrorType());
  }

  @Test
  void aCancelInterruptsTheHandlerAndItsOutcomeIsDropped() throws Exception {
    start(builder().build());
    FakeBroker.Stream s = connect();
    running(s, 3);
    // A cancel for another lease of the job is not about this one.
    s.send(ConnectResponse.newBuilder().setCancel(Cancel.newBuilder().setJobId(3).setLeaseToken("3.old")).build());
    s.send(cancel(3, "3.a"));
    assertEquals("interrupted requested", nextSeen());
    // The slot is free at once and nothing is reported: the next job's messages come next.
    s.assign(4, "ok", "", "4.a");
    assertEquals(4, s.recv(STARTED).getStarted().getJobId());
    assertEquals(4, s.recv(RESULT).getResult().getJobId());
  }

  @Test
  void aLeaseThatRunsOutWithoutAnExtensionCancelsTheHandler() throws Exception {
    start(builder().build());
    // Lease 1 s, heartbeats every 400 ms that the broker never answers: the worker gives the
    // lease up 250 ms early by its own clock, and reports nothing.
    FakeBroker.Stream s = connect(Duration.ofSeconds(1), Duration.ofMillis(400));
    running(s, 5);
    assertEquals("interrupted lease_lost", nextSeen());
    // Given up: nothing is reported, and the slot takes the next job.
    s.assign(50, "ok", "", "50.a");
    assertEquals(50, s.recv(STARTED).getStarted().getJobId());
    assertEquals(50, s.recv(RESULT).getResult().getJobId());
  }

  @Test
  void answeredHeartbeatsKeepTheLease() throws Exception {
    start(builder().build());
    FakeBroker.Stream s = connect(Duration.ofSeconds(1), Duration.ofMillis(200));
    running(s, 6);
    // Six answered heartbeats carry the lease past its first second more than once.
    for (int i = 0; i < 6; i++) {
      var hb = s.recv(HEARTBEAT).getHeartbeat();
      assertEquals(List.of(ref(6, "6.a")), hb.getLeasesList());
      s.send(ConnectResponse.newBuilder().setHeartbeatAck(HeartbeatAck.newBuilder().addExtended(ref(6, "6.a"))).build());
    }
    assertNull(seen.poll(), "the handler was cancelled while its lease was extended");
    s.send(cancel(6, "6.a"));
    assertEquals("interrupted requested", nextSeen());
  }

  @Test
  void aStaleStartedStopsTheJob() throws Exception {
    start(builder().build());
    FakeBroker.Stream s = connect();
    running(s, 8);
    s.send(ConnectResponse.newBuilder()
        .setRefused(Refused.newBuilder().setJobId(8).setLeaseToken("8.a").setRefusedMessage(RefusedMessage.REFUSED_MESSAGE_STARTED).setCode(9))
        .build());
    assertEquals("interrupted lease_lost", nextSeen());
  }

  @Test
  void anAttemptTimeoutIsReportedAsATimeout() throws Exception {
    start(builder().build());
    FakeBroker.Stream s = connect();
    s.assign(Assignment.newBuilder()
        .setJob(Job.newBuilder().setId(9).setType("wait"))
        .setAttempt(1)
        .setLeaseToken("9.a")
        .setAttemptTimeout(Failures.toProto(Duration.ofMillis(200)))
        .build());
    s.recv(STARTED);
    Failure f = s.recv(RESULT).getResult().getFailure();
    assertTrue(f.getTimedOut(), f.toString());
    assertEquals(FailureKind.FAILURE_KIND_TRANSIENT, f.getKind());
    assertEquals("java.lang.InterruptedException", f.getErrorType());
    assertEquals("started 9", nextSeen());
    assertEquals("interrupted timeout", nextSeen());
  }

  @Test
  void aResultIsSentAgainOnTheNextStreamUntilAnswered() throws Exception {
    start(builder().build());
    FakeBroker.Stream s = connect();
    s.assign(10, "ok", "", "10.a");
    s.recv(STARTED);
    s.recv(RESULT);
    s.breakWith(Status.UNAVAILABLE.withDescription("broker restarting"));

    FakeBroker.Stream s2 = broker.accept();
    var hello = s2.recv(HELLO).getHello();
    assertEquals(List.of(ref(10, "10.a")), hello.getHeldList());
    s2.welcome(LONG, LONG);
    var again = s2.recv(RESULT).getResult();
    assertEquals("10.a", again.getLeaseToken());
    assertTrue(again.hasSuccess());
    s2.send(ack(10, "10.a"));
    // Answered: the next Hello holds nothing.
    s2.breakWith(Status.UNAVAILABLE);
    assertEquals(0, broker.accept().recv(HELLO).getHello().getHeldCount());
  }

  @Test
  void shutdownDrainsThenHalfClosesAndRunReturns() throws Exception {
    start(builder().gracePeriod(Duration.ofMillis(300)).build());
    FakeBroker.Stream s = connect();
    running(s, 11);
    worker.shutdown();
    s.recv(DRAIN);
    // An Assignment that crossed the Drain is handed back.
    s.assign(12, "ok", "", "12.a");
    assertEquals(12, s.recv(RELEASE).getRelease().getJobId());
    // The grace runs out: the handler is cut off and reported as a transient WorkerShutdown.
    Failure f = s.recv(RESULT).getResult().getFailure();
    assertEquals("WorkerShutdown", f.getErrorType());
    assertEquals(FailureKind.FAILURE_KIND_TRANSIENT, f.getKind());
    assertEquals("interrupted shutdown", nextSeen());
    s.send(ack(11, "11.a"));
    assertNull(s.recv(null), "the worker did not half-close");
    s.close();
    assertNull(run.get(FakeBroker.WAIT_SECONDS, TimeUnit.SECONDS));
  }

  @Test
  void aDrainRequestFinishesTheStreamAndTheWorkerReconnects() throws Exception {
    start(builder().build());
    FakeBroker.Stream s = connect();
    s.send(ConnectResponse.newBuilder().setDrain(DrainRequest.newBuilder().setReason("broker shutting down")).build());
    assertNull(s.recv(null));
    s.close();
    broker.accept().recv(HELLO);
    assertFalse(run.isDone());
  }

  @Test
  void aRefusedTokenStopsTheWorkerWithTheSettingToChange() throws Exception {
    start(builder().token("jw_made_up").build());
    FakeBroker.Stream s = broker.accept();
    s.recv(HELLO);
    s.breakWith(Status.UNAUTHENTICATED.withDescription("unknown token"));
    Throwable err = run.get(FakeBroker.WAIT_SECONDS, TimeUnit.SECONDS);
    BrokerConnectException ce = assertInstanceOf(BrokerConnectException.class, err);
    assertEquals(BrokerConnectException.Kind.AUTH, ce.kind());
    assertTrue(ce.fix().contains("JOBWIRE_TOKEN"), ce.fix());
  }

  @Test
  void anInvalidArgumentIsNotRetried() throws Exception {
    start(builder().build());
    broker.accept().breakWith(Status.INVALID_ARGUMENT.withDescription("capacity out of range"));
    Throwable err = run.get(FakeBroker.WAIT_SECONDS, TimeUnit.SECONDS);
    assertEquals(Status.Code.INVALID_ARGUMENT, Status.fromThrowable(err).getCode());
  }

  @Test
  void aBrokerThatGoesAwayIsWaitedFor() throws Exception {
    start(builder().build());
    AtomicInteger opened = new AtomicInteger();
    for (int i = 0; i < 3; i++) {
      broker.accept().breakWith(Status.UNAVAILABLE.withDescription("restarting"));
      opened.incrementAndGet();
    }
    connect();
    assertFalse(run.isDone());
    assertEquals(3, opened.get());
  }

  @Test
  void anAssignmentBeyondCapacityIsReleased() throws Exception {
    start(builder().build());
    FakeBroker.Stream s = connect();
    s.assign(20, "wait", "", "20.a");
    s.recv(STARTED);
    s.assign(21, "wait", "", "21.a");
    s.recv(STARTED);
    s.assign(22, "ok", "", "22.a");
    var rel = s.recv(RELEASE).getRelease();
    assertEquals(22, rel.getJobId());
    assertEquals("worker is at capacity", rel.getReason());
  }

  @Test
  void theHandlerThreadIsNotLeftInterrupted() throws Exception {
    // One handler thread for every job: the interrupt of a cancel that the handler ignored
    // (it polls isCancelled instead) must not reach the next job.
    // A plain thread taking tasks from a queue: unlike a ThreadPoolExecutor, it clears no
    // interrupt between tasks.
    BlockingQueue<Runnable> tasks = new java.util.concurrent.LinkedBlockingQueue<>();
    Thread runner = new Thread(() -> {
      try {
        for (;;) {
          tasks.take().run();
        }
      } catch (InterruptedException e) {
        seen.add("the handler thread was left interrupted");
      }
    });
    runner.setDaemon(true);
    runner.start();
    Worker w = builder().capacity(1).handlerExecutor(tasks::add).build();
    w.handle("poll", ctx -> {
      seen.add("polling");
      while (!ctx.isCancelled()) {
        Thread.onSpinWait();
      }
      seen.add("saw the cancel");
    });
    w.handle("check", ctx -> seen.add("interrupted " + Thread.currentThread().isInterrupted()));
    start(w);
    FakeBroker.Stream s = connect();
    s.assign(30, "poll", "", "30.a");
    s.recv(STARTED);
    assertEquals("polling", nextSeen());
    s.send(cancel(30, "30.a"));
    assertEquals("saw the cancel", nextSeen());
    s.assign(31, "check", "", "31.a");
    s.recv(STARTED);
    assertTrue(s.recv(RESULT).getResult().hasSuccess());
    assertEquals("interrupted false", nextSeen());
  }

  private static List<ConnectRequest.MessageCase> kinds(ConnectRequest frame) {
    assertTrue(frame.hasBatch(), () -> "expected a batch frame, got " + frame);
    return frame.getBatch().getMessagesList().stream().map(ConnectRequest::getMessageCase).toList();
  }

  @Test
  void aLoneMessageTravelsUnwrapped() throws Exception {
    start(builder().build());
    FakeBroker.Stream s = connect();
    s.assign(40, "wait", "", "40.a");
    ConnectRequest m = s.frame();
    assertEquals(STARTED, m.getMessageCase(), () -> "got " + m);
    assertEquals(40, m.getStarted().getJobId());
  }

  @Test
  void aResponseBatchIsHandledInOrderAndWhatItMakesReadyLeavesAsOneFrame() throws Exception {
    start(builder().build());
    FakeBroker.Stream s = connect();
    s.send(ConnectResponse.newBuilder()
        .setBatch(ConnectResponseBatch.newBuilder()
            .addMessages(FakeBroker.assignment(41, "wait", "", "41.a"))
            .addMessages(FakeBroker.assignment(42, "wait", "", "42.a"))
            .addMessages(FakeBroker.assignment(43, "ok", "", "43.a")))
        .build());
    // In order: the first two fill the capacity of 2, so the third is handed back; and the
    // messages the batch made ready leave together.
    ConnectRequest frame = s.frame();
    assertEquals(List.of(STARTED, STARTED, RELEASE), kinds(frame));
    var batch = frame.getBatch().getMessagesList();
    assertEquals(41, batch.get(0).getStarted().getJobId());
    assertEquals(42, batch.get(1).getStarted().getJobId());
    assertEquals("worker is at capacity", batch.get(2).getRelease().getReason());
  }

  @Test
  void noBatchHoldsMoreThanMaxBatchMessages() throws Exception {
    start(builder().build());
    FakeBroker.Stream s = connect();
    // One more Assignment than a batch may hold, of a type without a handler: their Releases are
    // ready together.
    ConnectResponseBatch.Builder in = ConnectResponseBatch.newBuilder();
    for (int i = 0; i <= Worker.MAX_BATCH; i++) {
      in.addMessages(FakeBroker.assignment(100 + i, "unknown", "", "t"));
    }
    s.send(ConnectResponse.newBuilder().setBatch(in).build());
    ConnectRequest first = s.frame();
    assertEquals(Worker.MAX_BATCH, kinds(first).size());
    assertEquals(100, first.getBatch().getMessages(0).getRelease().getJobId());
    ConnectRequest last = s.frame();
    assertEquals(RELEASE, last.getMessageCase(), () -> "got " + last);
    assertEquals(100 + Worker.MAX_BATCH, last.getRelease().getJobId());
  }

  @Test
  void noBatchGathersMoreThanMaxBatchBytes() throws Exception {
    start(builder().build());
    FakeBroker.Stream s = connect();
    // Three Assignments of a type without a handler whose name is 400 KiB long: their Releases,
    // ready together, each name it. Two fit in 1 MiB; the third starts the next frame.
    String type = "t".repeat(400 << 10);
    ConnectResponseBatch.Builder in = ConnectResponseBatch.newBuilder();
    for (int i = 0; i < 3; i++) {
      in.addMessages(FakeBroker.assignment(200 + i, type, "", "t"));
    }
    s.send(ConnectResponse.newBuilder().setBatch(in).build());
    ConnectRequest first = s.frame();
    assertEquals(List.of(RELEASE, RELEASE), kinds(first));
    assertTrue(first.getSerializedSize() <= Worker.MAX_BATCH_BYTES + 16, () -> "a frame of " + first.getSerializedSize() + " bytes");
    ConnectRequest last = s.frame();
    assertEquals(RELEASE, last.getMessageCase(), () -> "got " + last.getMessageCase());
    assertEquals(202, last.getRelease().getJobId());
  }

  @Test
  void drainTravelsAloneAndTheResultsReadyWithItLeaveAsOneFrame() throws Exception {
    start(builder().gracePeriod(Duration.ofMillis(200)).build());
    FakeBroker.Stream s = connect();
    s.assign(44, "wait", "", "44.a");
    s.recv(STARTED);
    s.assign(45, "wait", "", "45.a");
    s.recv(STARTED);
    assertEquals(List.of("started 44", "started 45"), List.of(nextSeen(), nextSeen()).stream().sorted().toList());
    worker.shutdown();
    s.recv(DRAIN);
    s.recv(RESULT);
    s.recv(RESULT);
    s.breakWith(Status.UNAVAILABLE.withDescription("broker restarting"));

    // On the next stream the Drain and both unanswered Results are ready at once.
    FakeBroker.Stream s2 = broker.accept();
    assertEquals(2, s2.recv(HELLO).getHello().getHeldCount());
    s2.welcome(LONG, LONG);
    assertEquals(DRAIN, s2.frame().getMessageCase());
    assertEquals(List.of(RESULT, RESULT), kinds(s2.frame()));
  }
}
