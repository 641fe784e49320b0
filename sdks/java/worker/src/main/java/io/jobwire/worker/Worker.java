package io.jobwire.worker;

import static java.util.concurrent.TimeUnit.NANOSECONDS;

import io.grpc.ChannelCredentials;
import io.grpc.ConnectivityState;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.TlsChannelCredentials;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import io.grpc.stub.MetadataUtils;
import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.System.Logger.Level;
import java.lang.reflect.Proxy;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executor;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.DoubleSupplier;
import java.util.function.LongSupplier;
import jobwire.v1.JobOuterClass.FailureKind;
import jobwire.v1.WorkerServiceGrpc;
import jobwire.v1.WorkerServiceOuterClass.Assignment;
import jobwire.v1.WorkerServiceOuterClass.Cancel;
import jobwire.v1.WorkerServiceOuterClass.ConnectRequest;
import jobwire.v1.WorkerServiceOuterClass.ConnectRequestBatch;
import jobwire.v1.WorkerServiceOuterClass.ConnectResponse;
import jobwire.v1.WorkerServiceOuterClass.Drain;
import jobwire.v1.WorkerServiceOuterClass.Failure;
import jobwire.v1.WorkerServiceOuterClass.Heartbeat;
import jobwire.v1.WorkerServiceOuterClass.Hello;
import jobwire.v1.WorkerServiceOuterClass.LeaseRef;
import jobwire.v1.WorkerServiceOuterClass.Progress;
import jobwire.v1.WorkerServiceOuterClass.Refused;
import jobwire.v1.WorkerServiceOuterClass.RefusedMessage;
import jobwire.v1.WorkerServiceOuterClass.Release;
import jobwire.v1.WorkerServiceOuterClass.Result;
import jobwire.v1.WorkerServiceOuterClass.ResultAck;
import jobwire.v1.WorkerServiceOuterClass.Started;
import jobwire.v1.WorkerServiceOuterClass.Success;
import jobwire.v1.WorkerServiceOuterClass.Welcome;

/**
 * Runs handlers for jobs pushed by a Jobwire broker.
 *
 * <pre>{@code
 * Worker worker = Worker.fromEnv().capacity(8).build();
 * worker.handle("email.send", Email.class, (ctx, email) -> send(email));
 * worker.installSignalHandlers(); // SIGTERM and SIGINT start a graceful shutdown
 * worker.run();                   // returns once drained
 * }</pre>
 *
 * <p>One stream to the broker per worker (docs/protocol.md). Every piece of protocol state lives
 * on one thread, the worker's loop: gRPC delivers the broker's messages there, timers fire there,
 * and handlers hand their outcome back there, so the state needs no locks and the stream has a
 * single writer by construction. Handlers run on threads of their own (a cached pool, or the
 * executor given to the builder), at most {@code capacity} at once.
 *
 * <p>A handler returns for success (what it gave {@link JobContext#setResult} is the job's
 * result) and throws for failure. FATAL (the job goes to the dead-letter queue at once): {@link
 * FatalException}, anything that implements {@link Fatal}, a payload the {@link PayloadDecoder}
 * refused, and the standard bug exceptions {@link Failures#FATAL_TYPES}.
 * Everything else is TRANSIENT (retried with the broker's backoff); {@link RetryAfterException}
 * asks for a specific wait.
 */
public final class Worker {
  static final String LOGGER = "io.jobwire.worker";
  private static final System.Logger log = System.getLogger(LOGGER);

  /** Refused codes the protocol gives a meaning to (gRPC status codes). */
  static final int CODE_FAILED_PRECONDITION = 9; // stale lease or finished job: drop the message

  static final int CODE_UNAVAILABLE = 14; // storage busy: send the message again after a short backoff

  static final int CODE_INVALID_ARGUMENT = 3; // a progress report broke a rule: the job goes on

  /** The most messages one batch frame may hold (docs/protocol.md, "Batch frames"). */
  static final int MAX_BATCH = 1024;

  /**
   * The most bytes of encoded messages one batch frame gathers: a message that would take it past
   * this starts the next frame, one larger goes alone. The broker reads 4 MiB a message by
   * default, so results near their limit that are ready together never add up to more.
   */
  static final int MAX_BATCH_BYTES = 1 << 20;

  /**
   * The most bytes of one message read from the broker: a job with the largest payload (64 MiB)
   * and parents' results a broker may be set to take. gRPC reads 4 MiB unless told otherwise,
   * which an assignment passes on a broker whose operator raised max_payload_bytes or
   * max_result_bytes; the broker never sends more than it reads itself (docs/protocol.md).
   */
  static final int MAX_RECEIVE_BYTES = 96 << 20;

  /** Stream errors that no reconnect can fix: the worker's configuration is wrong. */
  private static final Set<Status.Code> PERMANENT_CODES =
      EnumSet.of(Status.Code.INVALID_ARGUMENT, Status.Code.UNAUTHENTICATED, Status.Code.PERMISSION_DENIED, Status.Code.UNIMPLEMENTED);

  private static final Metadata.Key<String> AUTHORIZATION = Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  // Configuration, fixed by the builder.
  private final String address;
  private final String workerId;
  private final int capacity;
  private final List<String> queues;
  private final boolean movable;
  private final Duration gracePeriod;
  private final Duration finishTimeout;
  private final Duration connectTimeout;
  private final Duration resendDelay;
  private final Backoff backoff;
  private final ChannelCredentials credentials;
  private final String serverName;
  private final String token;
  private final boolean usesTls;
  private final boolean clientCert;
  private final PayloadDecoder decoder;
  private final ResultEncoder encoder;
  private final Executor handlerExecutor;
  private final DoubleSupplier random;
  /** The clock progress reports are timed by (System.nanoTime unless a test moves its own). */
  private final LongSupplier nanoClock;
  private final long progressIntervalNanos;

  private final Map<String, Handler> handlers = new ConcurrentHashMap<>();
  private final AtomicBoolean running = new AtomicBoolean();
  private volatile boolean shutdownRequested;
  private volatile ScheduledThreadPoolExecutor loop;
  private volatile Thread loopThread;

  // Owned by the loop thread.
  private final Map<Long, Task> jobs = new HashMap<>();
  private final Map<Long, Release> releases = new HashMap<>();
  private final List<ScheduledFuture<?>> timers = new ArrayList<>();
  private Executor handlerPool;
  private ManagedChannel channel;
  private WorkerServiceGrpc.WorkerServiceStub stub;
  private Session session;
  private ScheduledFuture<?> reconnectTimer;
  private CompletableFuture<Void> stopped;
  private boolean shuttingDown;
  private boolean hardStopped;
  /**
   * How long a lease lasts on this worker's clock: the Welcome's lease duration less {@link
   * Leases#margin}. Zero (no lease duration announced) leaves leases to the broker.
   */
  private long leaseAllowanceNanos;
  /** The largest result the broker stores (Welcome.max_result_bytes); 0: it did not say. */
  private int maxResultBytes;

  private Worker(Builder b) {
    this.address = b.address;
    this.workerId = b.workerId;
    this.capacity = b.capacity;
    this.queues = List.copyOf(b.queues);
    this.movable = b.movable;
    this.gracePeriod = b.gracePeriod;
    this.finishTimeout = b.finishTimeout;
    this.connectTimeout = b.connectTimeout;
    this.resendDelay = b.resendDelay;
    this.backoff = b.backoff;
    this.credentials = b.credentials;
    this.serverName = b.serverName;
    this.token = b.token;
    this.usesTls = b.usesTls;
    this.clientCert = b.clientCert;
    this.decoder = b.decoder;
    this.encoder = b.encoder;
    this.handlerExecutor = b.handlerExecutor;
    this.random = b.random;
    this.nanoClock = b.nanoClock;
    this.progressIntervalNanos = b.progressIntervalNanos;
  }

  /** A builder with the defaults: 127.0.0.1:7070, plaintext, capacity 8. */
  public static Builder builder() {
    return new Builder();
  }

  /**
   * A builder for the broker the environment names: JOBWIRE_ADDR, JOBWIRE_TOKEN, JOBWIRE_TLS,
   * JOBWIRE_TLS_CA, JOBWIRE_TLS_CERT, JOBWIRE_TLS_KEY and JOBWIRE_TLS_SERVER_NAME
   * (docs/security.md). Options set on the builder afterwards win.
   */
  public static Builder fromEnv() {
    return builder().settings(ConnectionSettings.fromEnv());
  }

  /** Registers the handler of a job type, which gets the payload as bytes ({@link JobContext#payload()}). */
  public Worker handle(String jobType, Handler handler) {
    if (jobType == null || jobType.isEmpty()) {
      throw new IllegalArgumentException("job type must not be empty");
    }
    Objects.requireNonNull(handler, "handler");
    if (running.get()) {
      throw new IllegalStateException("register handlers before run()");
    }
    if (handlers.putIfAbsent(jobType, handler) != null) {
      throw new IllegalArgumentException("a handler for " + jobType + " is already registered");
    }
    return this;
  }

  /**
   * Registers the handler of a job type whose payload the builder's {@link PayloadDecoder} turns
   * into a {@code T}. A payload it cannot decode fails the attempt as FATAL.
   */
  public <T> Worker handle(String jobType, Class<T> payloadType, TypedHandler<T> handler) {
    Objects.requireNonNull(payloadType, "payloadType");
    Objects.requireNonNull(handler, "handler");
    if (decoder == null) {
      throw new IllegalStateException("typed handlers need a payload decoder: Worker.builder().payloadDecoder(mapper::readValue)");
    }
    return handle(jobType, ctx -> {
      T payload;
      try {
        payload = decoder.decode(ctx.payload(), payloadType);
      } catch (Exception e) {
        throw new PayloadException("job " + ctx.id() + ": the payload is not a " + payloadType.getSimpleName(), e);
      }
      handler.handle(ctx, payload);
    });
  }

  /** The worker id sent to the broker, shown in attempt history. */
  public String workerId() {
    return workerId;
  }

  /**
   * Starts a graceful shutdown on SIGTERM and SIGINT instead of the JVM's default (exit at once
   * with status 143 or 130): {@link #run()} then returns once drained, and a program whose main
   * ends there exits 0. Where the JVM offers no signal API, a shutdown hook drains instead.
   */
  public void installSignalHandlers() {
    try {
      Class<?> signal = Class.forName("sun.misc.Signal");
      Class<?> handlerType = Class.forName("sun.misc.SignalHandler");
      Object handler = Proxy.newProxyInstance(handlerType.getClassLoader(), new Class<?>[] {handlerType}, (proxy, m, args) -> {
        switch (m.getName()) {
          case "handle" -> shutdown("SIG" + signal.getMethod("getName").invoke(args[0]));
          case "hashCode" -> {
            return System.identityHashCode(proxy);
          }
          case "equals" -> {
            return proxy == args[0];
          }
          case "toString" -> {
            return "jobwire graceful shutdown";
          }
          default -> {}
        }
        return null;
      });
      for (String name : List.of("TERM", "INT")) {
        signal.getMethod("handle", signal, handlerType).invoke(null, signal.getConstructor(String.class).newInstance(name), handler);
      }
    } catch (ReflectiveOperationException | RuntimeException e) {
      log.log(Level.DEBUG, "no signal API; draining from a shutdown hook instead", e);
      Runtime.getRuntime().addShutdownHook(new Thread(() -> {
        shutdown("JVM shutdown");
        awaitStopped();
      }, "jobwire-shutdown"));
    }
  }

  private void awaitStopped() {
    CompletableFuture<Void> s = stopped;
    if (s == null) {
      return;
    }
    try {
      s.get(gracePeriod.plus(finishTimeout).plusSeconds(1).toMillis(), TimeUnit.MILLISECONDS);
    } catch (Exception e) {
      // Stopping anyway.
    }
  }

  /**
   * Connects, takes work and reconnects after errors, until a graceful shutdown completes.
   *
   * @throws BrokerConnectException when the token is refused or the TLS settings do not match the
   *     broker's: no reconnect can fix that
   * @throws StatusRuntimeException when the broker rejects the worker for another reason no
   *     reconnect can fix (INVALID_ARGUMENT, UNIMPLEMENTED, or UNAUTHENTICATED and
   *     PERMISSION_DENIED after a first success). A broker that is down or restarting is waited for.
   */
  public void run() throws InterruptedException {
    if (handlers.isEmpty()) {
      throw new IllegalStateException("register at least one handler before run()");
    }
    if (!running.compareAndSet(false, true)) {
      throw new IllegalStateException("run() is already running or has run");
    }
    ScheduledThreadPoolExecutor l = new ScheduledThreadPoolExecutor(1, r -> {
      Thread t = new Thread(r, "jobwire-worker");
      t.setDaemon(true);
      loopThread = t;
      return t;
    });
    l.setRemoveOnCancelPolicy(true);
    ExecutorService ownPool = null;
    if (handlerExecutor == null) {
      AtomicInteger n = new AtomicInteger();
      ownPool = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "jobwire-handler-" + n.incrementAndGet());
        t.setDaemon(true); // a handler that ignores its cancel never holds the process
        return t;
      });
    }
    handlerPool = ownPool != null ? ownPool : handlerExecutor;
    ManagedChannelBuilder<?> cb =
        Grpc.newChannelBuilder(address, credentials).executor(l).maxInboundMessageSize(MAX_RECEIVE_BYTES);
    if (serverName != null) {
      cb.overrideAuthority(serverName);
    }
    ManagedChannel ch = cb.build();
    channel = ch;
    WorkerServiceGrpc.WorkerServiceStub s = WorkerServiceGrpc.newStub(ch);
    if (token != null) {
      Metadata md = new Metadata();
      md.put(AUTHORIZATION, "Bearer " + token);
      s = s.withInterceptors(MetadataUtils.newAttachHeadersInterceptor(md));
    }
    stub = s;
    CompletableFuture<Void> done = new CompletableFuture<>();
    stopped = done;
    loop = l;
    l.execute(guarded(() -> {
      if (shutdownRequested) {
        beginShutdown("shutdown() before run()");
      }
      connect();
    }));
    try {
      done.get();
    } catch (ExecutionException e) {
      if (e.getCause() instanceof RuntimeException re) {
        throw re;
      }
      throw new IllegalStateException(e.getCause());
    } finally {
      CompletableFuture<Void> cleaned = new CompletableFuture<>();
      l.execute(() -> {
        hardStopped = true;
        timers.forEach(t -> t.cancel(false));
        for (Task t : jobs.values()) {
          stopLease(t);
          t.ctx.cancel(CancelReason.SHUTDOWN);
        }
        cleaned.complete(null);
      });
      try {
        cleaned.get(5, TimeUnit.SECONDS);
      } catch (ExecutionException | java.util.concurrent.TimeoutException e) {
        log.log(Level.WARNING, "worker loop did not stop cleanly", e);
      } finally {
        ch.shutdownNow();
        l.shutdownNow();
        if (ownPool != null) {
          ownPool.shutdownNow();
        }
      }
    }
  }

  /**
   * Starts a graceful shutdown: sends Drain, releases work not yet started, lets running jobs
   * finish within the grace period, then cancels them and reports them as transient {@code
   * WorkerShutdown} failures. {@link #run()} returns once every result is answered. Safe from any
   * thread, and before run().
   */
  public void shutdown() {
    shutdown("shutdown()");
  }

  private void shutdown(String why) {
    shutdownRequested = true;
    ScheduledThreadPoolExecutor l = loop;
    if (l != null) {
      try {
        l.execute(guarded(() -> beginShutdown(why)));
      } catch (RejectedExecutionException e) {
        // run() has ended.
      }
    }
  }

  // ---- the loop ---------------------------------------------------------------------------

  /** Logs a String.format message, formatting it only when the level is on. */
  private static void logf(Level level, String format, Object... args) {
    if (log.isLoggable(level)) {
      log.log(level, String.format(format, args));
    }
  }

  /** r, logging what it throws: a scheduled executor would swallow it. */
  private static Runnable guarded(Runnable r) {
    return () -> {
      try {
        r.run();
      } catch (RuntimeException | Error e) {
        log.log(Level.ERROR, "jobwire worker loop: unexpected error", e);
      }
    };
  }

  private void onLoop(Runnable r) {
    if (Thread.currentThread() == loopThread) {
      r.run();
    } else {
      try {
        loop.execute(guarded(r));
      } catch (RejectedExecutionException e) {
        // run() has ended.
      }
    }
  }

  private ScheduledFuture<?> after(Duration d, Runnable r) {
    return after(d.toNanos(), r);
  }

  private ScheduledFuture<?> after(long nanos, Runnable r) {
    return loop.schedule(guarded(r), Math.max(nanos, 0), NANOSECONDS);
  }

  /** Whether run() may return: shutting down with nothing left to report, or out of time. */
  private boolean done() {
    return hardStopped || (shuttingDown && jobs.isEmpty());
  }

  // ---- one stream ---------------------------------------------------------------------------

  /** One stream, from Hello to its end. */
  private final class Session {
    ClientCallStreamObserver<ConnectRequest> call;
    /** Messages queued on this pass of the loop, written together by {@link #flush}. */
    final List<ConnectRequest> outbox = new ArrayList<>();
    boolean flushQueued;
    boolean welcomed;
    boolean drainRequested;
    boolean closing;
    boolean settled;
    ScheduledFuture<?> helloTimer;
    ScheduledFuture<?> heartbeatTimer;
    ScheduledFuture<?> closeTimer;
  }

  private void connect() {
    Session s = new Session();
    stub.connect(new ClientResponseObserver<ConnectRequest, ConnectResponse>() {
      @Override
      public void beforeStart(ClientCallStreamObserver<ConnectRequest> call) {
        s.call = call;
      }

      @Override
      public void onNext(ConnectResponse r) {
        onLoop(() -> onResponse(s, r));
      }

      @Override
      public void onError(Throwable t) {
        onLoop(() -> finish(s, t));
      }

      @Override
      public void onCompleted() {
        onLoop(() -> finish(s, null));
      }
    });
    armHelloTimer(s);
    Hello.Builder hello = Hello.newBuilder()
        .setWorkerId(workerId)
        .addAllJobTypes(new TreeSet<>(handlers.keySet()))
        .addAllQueues(queues)
        .setCapacity(capacity)
        .setMovable(movable)
        .setAcceptsBatches(true);
    for (Task t : jobs.values()) {
      hello.addHeld(t.ref);
    }
    s.call.onNext(ConnectRequest.newBuilder().setHello(hello).build());
  }

  /**
   * Ends a stream whose Welcome has not come within the connect timeout of a connection: the
   * count restarts while the channel is still connecting (a JVM starting on a busy machine can
   * take longer than that to set up its first connection; a broker that cannot be reached fails
   * the call by itself).
   */
  private void armHelloTimer(Session s) {
    s.helloTimer = after(connectTimeout, () -> {
      if (s.settled || s.welcomed) {
        return;
      }
      if (channel.getState(false) != ConnectivityState.READY) {
        armHelloTimer(s);
        return;
      }
      s.call.cancel("no Welcome within the connect timeout", null);
      finish(s, Status.DEADLINE_EXCEEDED.withDescription("no Welcome within the connect timeout of " + connectTimeout).asRuntimeException());
    });
  }

  /** The stream ended: with err, or with status OK when err is null. */
  private void finish(Session s, Throwable err) {
    if (s.settled) {
      return;
    }
    s.settled = true;
    for (ScheduledFuture<?> f : new ScheduledFuture<?>[] {s.helloTimer, s.heartbeatTimer, s.closeTimer}) {
      if (f != null) {
        f.cancel(false);
      }
    }
    if (session == s) {
      session = null;
    }
    // Never-started jobs go back to PENDING when the stream ends; every held job here has
    // started, so only pending releases are forgotten.
    releases.clear();
    s.call.cancel("stream ended", null);
    if (err == null) {
      logf(Level.INFO, "stream to %s closed", address);
      reconnectLater();
      return;
    }
    Status status = Status.fromThrowable(err);
    if (s.welcomed) {
      afterFailure(status, null);
      return;
    }
    // Telling a TLS mismatch from a broker that went away may take a TLS handshake with it: not on
    // the loop.
    Thread probe = new Thread(() -> {
      BrokerConnectException ce = ConnectErrors.classify(status, address, usesTls, clientCert);
      onLoop(() -> afterFailure(status, ce));
    }, "jobwire-connect-probe");
    probe.setDaemon(true);
    probe.start();
  }

  private void afterFailure(Status status, BrokerConnectException ce) {
    if (ce != null) {
      logf(Level.ERROR, "cannot connect to the broker at %s: %s", address, ce.getMessage());
      stopped.completeExceptionally(ce);
      return;
    }
    if (PERMANENT_CODES.contains(status.getCode())) {
      logf(Level.ERROR, "broker rejected worker: %s %s", status.getCode(), status.getDescription());
      stopped.completeExceptionally(status.asRuntimeException());
      return;
    }
    logf(Level.WARNING, "stream failed: %s %s", status.getCode(), status.getDescription());
    reconnectLater();
  }

  private void reconnectLater() {
    if (done()) {
      stopped.complete(null);
      return;
    }
    Duration d = backoff.next();
    logf(Level.INFO, "reconnecting in %sms", d.toMillis());
    reconnectTimer = after(d, () -> {
      reconnectTimer = null;
      if (done()) {
        stopped.complete(null);
      } else {
        connect();
      }
    });
  }

  private void onResponse(Session s, ConnectResponse r) {
    if (s.settled) {
      return;
    }
    if (!s.welcomed) {
      if (!r.hasWelcome()) {
        s.call.cancel("expected Welcome", null);
        finish(s, Status.INTERNAL.withDescription("expected Welcome, got " + r.getMessageCase()).asRuntimeException());
        return;
      }
      s.welcomed = true;
      s.helloTimer.cancel(false);
      long hb = onWelcome(r.getWelcome());
      backoff.reset();
      session = s;
      s.heartbeatTimer = loop.scheduleAtFixedRate(guarded(this::heartbeat), hb, hb, NANOSECONDS);
      if (shuttingDown) {
        send(ConnectRequest.newBuilder().setDrain(Drain.getDefaultInstance()).build());
      }
      // Started again for a job still running: the old stream may have ended before the broker
      // read it, and then the adopted lease is not started there. A broker that has it ignores it.
      for (Task t : jobs.values()) {
        send(t.result != null ? resultMessage(t.result) : startedMessage(t));
      }
      maybeClose();
      return;
    }
    if (r.hasBatch()) {
      // Packing only: each message is handled in order, exactly as if it had come alone.
      for (ConnectResponse m : r.getBatch().getMessagesList()) {
        if (s.settled) {
          return;
        }
        onMessage(s, m);
      }
      return;
    }
    onMessage(s, r);
  }

  /** Handles one broker message after the Welcome (never a batch: batches do not nest). */
  private void onMessage(Session s, ConnectResponse r) {
    switch (r.getMessageCase()) {
      case ASSIGNMENT -> onAssignment(r.getAssignment());
      case RESULT_ACK -> onResultAck(r.getResultAck());
      case REFUSED -> onRefused(r.getRefused());
      case CANCEL -> onCancel(r.getCancel());
      case DRAIN -> {
        logf(Level.INFO, "broker asked to drain: %s", r.getDrain().getReason());
        s.drainRequested = true;
        maybeClose();
      }
      case HEARTBEAT_ACK -> onExtended(r.getHeartbeatAck().getExtendedList());
      default -> logf(Level.WARNING, "unexpected message %s", r.getMessageCase());
    }
  }

  /** Applies a Welcome and returns the heartbeat interval in nanoseconds. */
  private long onWelcome(Welcome w) {
    Duration lease = Failures.fromProto(w.getLeaseDuration());
    Duration hb = Failures.fromProto(w.getHeartbeatInterval());
    if (hb.isNegative() || hb.isZero()) {
      hb = lease.isZero() || lease.isNegative() ? Duration.ofSeconds(10) : lease.dividedBy(3);
    }
    leaseAllowanceNanos = lease.isZero() || lease.isNegative() ? 0 : lease.minus(Leases.margin(lease, hb)).toNanos();
    maxResultBytes = Math.max(w.getMaxResultBytes(), 0);
    // Heartbeats of the old stream are never answered; adopted leases keep their deadlines.
    for (Task t : jobs.values()) {
      t.heartbeatAt = -1;
    }
    logf(Level.INFO, "connected to %s as %s (session %s, lease %sms, heartbeat %sms, holding %s)",
        address, workerId, w.getSessionId(), lease.toMillis(), hb.toMillis(), jobs.size());
    for (LeaseRef ref : w.getLostList()) {
      Task t = jobs.get(ref.getJobId());
      if (t != null && t.token.equals(ref.getLeaseToken())) {
        logf(Level.WARNING, "lease of job %s lost while disconnected", ref.getJobId());
        drop(t, CancelReason.LEASE_LOST);
      }
    }
    return hb.toNanos();
  }

  private void heartbeat() {
    // Every held lease, including ones whose result is not yet stored: the lease must outlive a
    // broker that is slow to store the result.
    if (jobs.isEmpty()) {
      return;
    }
    long now = System.nanoTime();
    Heartbeat.Builder hb = Heartbeat.newBuilder();
    for (Task t : jobs.values()) {
      hb.addLeases(t.ref);
      if (t.heartbeatAt < 0) {
        t.heartbeatAt = now;
      }
    }
    send(ConnectRequest.newBuilder().setHeartbeat(hb).build());
  }

  /**
   * Queues m for the current stream; without one it is dropped (results are re-sent). What is
   * queued is written by a flush that runs after every task already waiting on the loop: the
   * messages that became ready together (the Started of each Assignment of one incoming batch,
   * the Results of handlers that finished meanwhile) leave in one frame, and none waits for company.
   */
  private void send(ConnectRequest m) {
    Session s = session;
    if (s == null || s.closing) {
      return;
    }
    s.outbox.add(m);
    if (!s.flushQueued) {
      s.flushQueued = true;
      try {
        loop.execute(guarded(() -> flush(s)));
      } catch (RejectedExecutionException e) {
        // run() has ended.
      }
    }
  }

  /**
   * Writes what s has queued, in order: a lone message as itself, runs of several as batch frames
   * of at most {@link #MAX_BATCH} messages and {@link #MAX_BATCH_BYTES}, and Drain alone (it never
   * travels in a batch).
   */
  private void flush(Session s) {
    s.flushQueued = false;
    List<ConnectRequest> out = s.outbox;
    if (out.isEmpty() || s.settled) {
      out.clear();
      return;
    }
    try {
      int from = 0;
      long bytes = 0; // of out[from, i)
      for (int i = 0; i <= out.size(); i++) {
        ConnectRequest m = i < out.size() ? out.get(i) : null;
        int n = m == null ? 0 : m.getSerializedSize();
        if (m != null && !m.hasDrain() && i - from < MAX_BATCH
            && (i == from || bytes + n <= MAX_BATCH_BYTES)) {
          bytes += n;
          continue;
        }
        write(s, out, from, i);
        if (m != null && m.hasDrain()) {
          s.call.onNext(m);
          from = i + 1;
          bytes = 0;
        } else {
          from = i;
          bytes = n;
        }
      }
    } catch (RuntimeException e) {
      log.log(Level.DEBUG, "write failed: the stream is ending", e);
    } finally {
      out.clear();
    }
  }

  /** Writes out[from, to) as one message: unwrapped when it is one, a batch frame when several. */
  private static void write(Session s, List<ConnectRequest> out, int from, int to) {
    if (to - from > 1) {
      s.call.onNext(ConnectRequest.newBuilder()
          .setBatch(ConnectRequestBatch.newBuilder().addAllMessages(out.subList(from, to)))
          .build());
    } else if (to - from == 1) {
      s.call.onNext(out.get(from));
    }
  }

  /** Half-closes the stream once draining and nothing is held any more. */
  private void maybeClose() {
    Session s = session;
    if (s == null || s.closing) {
      return;
    }
    if ((shuttingDown || s.drainRequested) && jobs.isEmpty()) {
      s.closing = true;
      flush(s); // what is queued goes before the half-close
      s.call.onCompleted();
      // If the broker does not end the stream in time, give up on it.
      s.closeTimer = after(finishTimeout, () -> {
        s.call.cancel("the broker did not end the stream", null);
        finish(s, Status.DEADLINE_EXCEEDED.withDescription("the broker did not end the stream").asRuntimeException());
      });
    }
  }

  // ---- broker messages ------------------------------------------------------------------------

  /** A job this worker holds: it counts against capacity until acknowledged, refused or cancelled. */
  private static final class Task {
    final JobContext ctx;
    final long jobId;
    final String token;
    final LeaseRef ref;
    Result result; // set once the handler finished; re-sent until answered
    boolean shutdownCancelled;
    boolean timedOut; // the attempt timeout passed and the handler was told to stop
    ScheduledFuture<?> timeoutTimer;
    // The lease as this worker counts it (see Leases): leaseTimer gives the job up unless an
    // extension moves it first. heartbeatAt is when the oldest heartbeat that named the lease on
    // this stream and has no answer yet was sent (System.nanoTime), or -1.
    ScheduledFuture<?> leaseTimer;
    long heartbeatAt = -1;
    final ProgressThrottle<Progress> progress;
    ScheduledFuture<?> progressTimer;

    Task(JobContext ctx, long progressIntervalNanos) {
      this.ctx = ctx;
      this.progress = new ProgressThrottle<>(progressIntervalNanos);
      this.jobId = ctx.id();
      this.token = ctx.leaseToken();
      this.ref = LeaseRef.newBuilder().setJobId(jobId).setLeaseToken(token).build();
    }
  }

  private void onAssignment(Assignment a) {
    long id = a.getJob().getId();
    Task old = jobs.get(id);
    if (old != null) {
      if (old.token.equals(a.getLeaseToken())) {
        return; // a duplicate of what runs
      }
      // A newer lease on the same job: ours is stale, so its outcome must not be reported.
      drop(old, CancelReason.LEASE_LOST);
    }
    boolean draining = shuttingDown || (session != null && session.drainRequested);
    Handler fn = handlers.get(a.getJob().getType());
    String reason = null;
    if (draining) {
      reason = "worker is draining";
    } else if (fn == null) {
      reason = "no handler for job type " + a.getJob().getType();
    } else if (jobs.size() >= capacity) {
      reason = "worker is at capacity";
    }
    if (reason != null) {
      release(Release.newBuilder().setJobId(id).setLeaseToken(a.getLeaseToken()).setReason(reason).build());
      return;
    }
    Task t = new Task(new JobContext(a, encoder), progressIntervalNanos);
    t.ctx.progressSink((fraction, message) -> offerProgress(t, fraction, message));
    jobs.put(id, t);
    armLease(t, System.nanoTime());
    // Started must reach the broker before user code runs: the attempt counts from here.
    send(startedMessage(t));
    logf(Level.DEBUG, "job %s (%s) attempt %s started", id, a.getJob().getType(), a.getAttempt());
    Optional<Duration> timeout = t.ctx.attemptTimeout();
    if (timeout.isPresent()) {
      // The handler is told to stop once its attempt timeout has passed; it reports that as the
      // timeout it is (Failure.timed_out), not as an ordinary transient failure.
      t.timeoutTimer = after(timeout.get(), () -> attemptTimedOut(t, timeout.get()));
    }
    execute(t, fn);
  }

  private void attemptTimedOut(Task t, Duration timeout) {
    if (jobs.get(t.jobId) != t || t.result != null) {
      return;
    }
    logf(Level.WARNING, "job %s outlived its attempt timeout of %sms: cancelling it", t.jobId, timeout.toMillis());
    t.timedOut = true;
    t.ctx.cancel(CancelReason.TIMEOUT);
  }

  private void onResultAck(ResultAck ack) {
    Task t = jobs.get(ack.getJobId());
    if (t == null || !t.token.equals(ack.getLeaseToken())) {
      return;
    }
    jobs.remove(ack.getJobId());
    logf(Level.DEBUG, "job %s result stored: %s", ack.getJobId(), ack.getDecision());
    afterFree();
  }

  private void onCancel(Cancel c) {
    Task t = jobs.get(c.getJobId());
    if (t == null || !t.token.equals(c.getLeaseToken())) {
      return;
    }
    CancelReason reason = switch (c.getReason()) {
      case CANCEL_REASON_TIMEOUT -> CancelReason.TIMEOUT;
      case CANCEL_REASON_LEASE_LOST -> CancelReason.LEASE_LOST;
      default -> CancelReason.REQUESTED;
    };
    logf(Level.INFO, "job %s cancelled by broker (%s)", c.getJobId(), reason.label());
    drop(t, reason);
  }

  private void onRefused(Refused r) {
    if (r.getRefusedMessage() == RefusedMessage.REFUSED_MESSAGE_RELEASE) {
      Release rel = releases.get(r.getJobId());
      if (rel != null && rel.getLeaseToken().equals(r.getLeaseToken())) {
        if (r.getCode() == CODE_UNAVAILABLE) {
          later(() -> {
            if (releases.get(rel.getJobId()) == rel) {
              send(ConnectRequest.newBuilder().setRelease(rel).build());
            }
          });
        } else {
          releases.remove(r.getJobId());
        }
      }
      return;
    }
    Task t = jobs.get(r.getJobId());
    if (t == null || !t.token.equals(r.getLeaseToken())) {
      return;
    }
    if (r.getCode() == CODE_UNAVAILABLE) {
      if (r.getRefusedMessage() == RefusedMessage.REFUSED_MESSAGE_RESULT) {
        later(() -> {
          if (jobs.get(t.jobId) == t && t.result != null) {
            send(resultMessage(t.result));
          }
        });
      } else if (r.getRefusedMessage() == RefusedMessage.REFUSED_MESSAGE_STARTED) {
        later(() -> {
          if (jobs.get(t.jobId) == t && t.result == null) {
            send(startedMessage(t));
          }
        });
      }
      return; // a refused heartbeat is repeated by the next tick anyway
    }
    if (r.getRefusedMessage() == RefusedMessage.REFUSED_MESSAGE_PROGRESS && r.getCode() == CODE_INVALID_ARGUMENT) {
      logf(Level.WARNING, "broker refused a progress report of job %s: %s", r.getJobId(), r.getMessage());
      return; // progress is advisory: the job goes on
    }
    boolean settledByResult = r.getRefusedMessage() == RefusedMessage.REFUSED_MESSAGE_HEARTBEAT
        || r.getRefusedMessage() == RefusedMessage.REFUSED_MESSAGE_PROGRESS;
    if (settledByResult && t.result != null) {
      return; // the Result's own answer settles it
    }
    logf(Level.WARNING, "broker refused %s for job %s (code %s: %s); dropping the job",
        r.getRefusedMessage(), r.getJobId(), r.getCode(), r.getMessage());
    drop(t, CancelReason.LEASE_LOST);
  }

  // ---- the lease as this worker counts it (see Leases) ----------------------------------------

  /** (Re)starts t's lease deadline: start (System.nanoTime) plus the lease allowance. */
  private void armLease(Task t, long start) {
    stopLease(t);
    if (leaseAllowanceNanos <= 0) {
      return;
    }
    t.leaseTimer = after(start + leaseAllowanceNanos - System.nanoTime(), () -> leaseRanOut(t));
  }

  private static void stopLease(Task t) {
    if (t.leaseTimer != null) {
      t.leaseTimer.cancel(false);
      t.leaseTimer = null;
    }
  }

  /**
   * Gives up a job whose lease passed on this worker's clock without an extension: the broker
   * (frozen or cut off) may already run its next attempt elsewhere.
   */
  private void leaseRanOut(Task t) {
    t.leaseTimer = null;
    if (jobs.get(t.jobId) != t || t.result != null) {
      return;
    }
    logf(Level.WARNING, "job %s: lease ran out without an extension from the broker; cancelling it", t.jobId);
    drop(t, CancelReason.LEASE_LOST);
  }

  /** Moves the deadline of every lease a HeartbeatAck lists as extended. */
  private void onExtended(List<LeaseRef> extended) {
    long now = System.nanoTime();
    for (LeaseRef ref : extended) {
      Task t = jobs.get(ref.getJobId());
      if (t == null || !t.token.equals(ref.getLeaseToken())) {
        continue;
      }
      long start = t.heartbeatAt < 0 ? now : Math.min(t.heartbeatAt, now);
      t.heartbeatAt = -1;
      if (t.result == null) {
        armLease(t, start);
      }
    }
  }

  // ---- progress (see ProgressThrottle) --------------------------------------------------------

  /**
   * Takes a report from the handler's thread: the throttle decides there, and only what is to be
   * sent or scheduled crosses to the loop, at most twice a second.
   */
  private void offerProgress(Task t, double fraction, String message) {
    Progress.Builder p = Progress.newBuilder().setJobId(t.jobId).setLeaseToken(t.token).setMessage(message);
    if (!Double.isNaN(fraction)) {
      p.setFraction(fraction);
    }
    ProgressThrottle.Offer<Progress> offer = t.progress.offer(nanoClock.getAsLong(), p.build());
    if (offer.any()) {
      onLoop(() -> progressOut(t, offer));
    }
  }

  private void progressOut(Task t, ProgressThrottle.Offer<Progress> offer) {
    if (jobs.get(t.jobId) != t || t.result != null) {
      return;
    }
    if (offer.send() != null) {
      send(ConnectRequest.newBuilder().setProgress(offer.send()).build());
    }
    if (offer.dueAt() != ProgressThrottle.Offer.NONE) {
      t.progressTimer = after(offer.dueAt() - nanoClock.getAsLong(), () -> {
        // Sends the report held back, unless the throttle was closed meanwhile (stopProgress).
        t.progressTimer = null;
        Progress p = t.progress.due(nanoClock.getAsLong());
        if (p != null) {
          send(ConnectRequest.newBuilder().setProgress(p).build());
        }
      });
    }
  }

  /**
   * No progress for t from now on: its result goes next, or it is gone. Returns the report held
   * back, which goes right before the result, or null.
   */
  private static Progress stopProgress(Task t) {
    if (t.progressTimer != null) {
      t.progressTimer.cancel(false);
      t.progressTimer = null;
    }
    return t.progress.close();
  }

  /**
   * The FATAL failure of an attempt whose result the broker would not store: retrying produces
   * the same result.
   */
  static Failure resultTooLarge(long jobId, int size, int limit) {
    return Failure.newBuilder()
        .setKind(FailureKind.FAILURE_KIND_FATAL)
        .setErrorType("ResultTooLarge")
        .setMessage("the result of job " + jobId + " is " + size + " bytes, more than the broker's limit of " + limit + " bytes")
        .build();
  }

  // ---- handlers -------------------------------------------------------------------------------

  private void execute(Task t, Handler fn) {
    try {
      handlerPool.execute(() -> {
        Throwable err = null;
        t.ctx.bind(Thread.currentThread());
        try {
          fn.handle(t.ctx);
        } catch (Throwable e) { // every outcome of user code is reported
          err = e;
        } finally {
          t.ctx.unbind();
        }
        Throwable outcome = err;
        onLoop(() -> handlerDone(t, outcome));
      });
    } catch (RejectedExecutionException e) {
      handlerDone(t, e);
    }
  }

  private void handlerDone(Task t, Throwable err) {
    if (t.timeoutTimer != null) {
      t.timeoutTimer.cancel(false);
    }
    stopLease(t); // the result is sent whatever becomes of the lease now
    Progress last = stopProgress(t); // nothing after the result; what was held back goes before it
    if (jobs.get(t.jobId) != t) {
      return; // cancelled or lost meanwhile: the broker refuses results for this lease
    }
    if (last != null) {
      send(ConnectRequest.newBuilder().setProgress(last).build());
    }
    Result.Builder r = Result.newBuilder().setJobId(t.jobId).setLeaseToken(t.token);
    byte[] value = t.ctx.result();
    if (err == null && value != null && maxResultBytes > 0 && value.length > maxResultBytes) {
      r.setFailure(resultTooLarge(t.jobId, value.length, maxResultBytes));
      logf(Level.DEBUG, "job %s failed (FATAL): %s", t.jobId, r.getFailure().getMessage());
    } else if (err == null && value != null && value.length > 0) {
      r.setSuccess(Success.newBuilder().setResult(com.google.protobuf.ByteString.copyFrom(value)));
    } else if (err == null) {
      r.setSuccess(Success.getDefaultInstance());
    } else if (t.timedOut) {
      // The attempt timeout stopped it: a timeout, whatever the handler made of that.
      Failure.Builder f = Failures.describe(err).setKind(FailureKind.FAILURE_KIND_TRANSIENT).setTimedOut(true);
      if (f.getMessage().isEmpty()) {
        f.setMessage("attempt timeout exceeded");
      }
      r.setFailure(f);
    } else if (t.shutdownCancelled) {
      r.setFailure(Failure.newBuilder()
          .setKind(FailureKind.FAILURE_KIND_TRANSIENT)
          .setErrorType("WorkerShutdown")
          .setMessage("the worker shut down before the job finished")
          .setDetails(Failures.describe(err).getDetails()));
    } else {
      Failure f = Failures.of(err);
      r.setFailure(f);
      logf(Level.DEBUG, "job %s failed (%s): %s: %s", t.jobId, f.getKind(), f.getErrorType(), f.getMessage());
    }
    t.result = r.build();
    send(resultMessage(t.result));
  }

  // ---- shutdown -------------------------------------------------------------------------------

  private void beginShutdown(String why) {
    if (shuttingDown) {
      return;
    }
    shuttingDown = true;
    logf(Level.INFO, "shutting down (%s): draining, %s job(s) running, grace %sms", why, jobs.size(), gracePeriod.toMillis());
    send(ConnectRequest.newBuilder().setDrain(Drain.getDefaultInstance()).build());
    timers.add(after(gracePeriod, this::graceOver));
    timers.add(after(gracePeriod.plus(finishTimeout), this::hardStop));
    afterFree();
  }

  private void graceOver() {
    for (Task t : new ArrayList<>(jobs.values())) {
      if (t.result == null) {
        logf(Level.WARNING, "grace period over: cancelling job %s", t.jobId);
        t.shutdownCancelled = true;
        t.ctx.cancel(CancelReason.SHUTDOWN);
      }
    }
  }

  private void hardStop() {
    if (!jobs.isEmpty()) {
      logf(Level.ERROR, "giving up on %s unreported job(s)", jobs.size());
    }
    hardStopped = true;
    Session s = session;
    if (s != null) {
      s.call.cancel("the worker is stopping", null);
      finish(s, Status.CANCELLED.withDescription("the worker is stopping").asRuntimeException());
    }
    wakeIfDone();
    stopped.complete(null);
  }

  // ---- helpers --------------------------------------------------------------------------------

  /** Forgets t: the broker has settled it. Its handler is cancelled; its outcome is dropped. */
  private void drop(Task t, CancelReason reason) {
    if (jobs.get(t.jobId) == t) {
      jobs.remove(t.jobId);
    }
    stopLease(t);
    stopProgress(t);
    if (t.timeoutTimer != null) {
      t.timeoutTimer.cancel(false);
    }
    t.ctx.cancel(reason);
    afterFree();
  }

  private void afterFree() {
    maybeClose();
    wakeIfDone();
  }

  /** Ends the wait for a reconnect once there is nothing left to reconnect for. */
  private void wakeIfDone() {
    if (done() && reconnectTimer != null && reconnectTimer.cancel(false)) {
      reconnectTimer = null;
      stopped.complete(null);
    }
  }

  private void release(Release rel) {
    logf(Level.DEBUG, "releasing job %s: %s", rel.getJobId(), rel.getReason());
    releases.put(rel.getJobId(), rel);
    send(ConnectRequest.newBuilder().setRelease(rel).build());
  }

  /** Runs r after the resend delay with jitter, so that a busy broker is not hammered in lockstep. */
  private void later(Runnable r) {
    timers.removeIf(ScheduledFuture::isDone);
    timers.add(after((long) (resendDelay.toNanos() * (1 + random.getAsDouble())), r));
  }

  private static ConnectRequest startedMessage(Task t) {
    return ConnectRequest.newBuilder().setStarted(Started.newBuilder().setJobId(t.jobId).setLeaseToken(t.token)).build();
  }

  private static ConnectRequest resultMessage(Result r) {
    return ConnectRequest.newBuilder().setResult(r).build();
  }

  // ---- configuration --------------------------------------------------------------------------

  /** Configures a {@link Worker}. */
  public static final class Builder {
    private String address = ConnectionSettings.DEFAULT_ADDRESS;
    private String workerId;
    private int capacity = 8;
    private List<String> queues = List.of();
    private boolean movable;
    private Duration gracePeriod = Duration.ofSeconds(30);
    private Duration finishTimeout = Duration.ofSeconds(10);
    private Duration connectTimeout = Duration.ofSeconds(10);
    private Duration resendDelay = Duration.ofMillis(500);
    private Backoff backoff;
    private ChannelCredentials credentials;
    private String serverName;
    private String token;
    private boolean tls;
    private String tlsCa;
    private String tlsCert;
    private String tlsKey;
    private boolean usesTls;
    private boolean clientCert;
    private PayloadDecoder decoder;
    private ResultEncoder encoder;
    private Executor handlerExecutor;
    private DoubleSupplier random = () -> ThreadLocalRandom.current().nextDouble();
    private LongSupplier nanoClock = System::nanoTime;
    private long progressIntervalNanos = ProgressThrottle.INTERVAL_NANOS;

    private Builder() {}

    /** Address, token and TLS settings, as {@link ConnectionSettings#fromEnv()} reads them. */
    public Builder settings(ConnectionSettings s) {
      address(s.address());
      token = s.token();
      tls = s.tls();
      tlsCa = s.caFile();
      tlsCert = s.certFile();
      tlsKey = s.keyFile();
      serverName = s.serverName();
      return this;
    }

    /** The broker's host:port (default 127.0.0.1:7070). */
    public Builder address(String address) {
      if (address == null || address.isBlank()) {
        throw new IllegalArgumentException("address must be host:port");
      }
      this.address = address;
      return this;
    }

    /** The stable id of this worker process, shown in attempt history (default host-pid). */
    public Builder workerId(String workerId) {
      this.workerId = workerId;
      return this;
    }

    /** How many jobs run at once, 1..10000 (default 8). */
    public Builder capacity(int capacity) {
      if (capacity < 1 || capacity > 10000) {
        throw new IllegalArgumentException("capacity must be in 1..10000, got " + capacity);
      }
      this.capacity = capacity;
      return this;
    }

    /** The queues to take from (default: every queue). */
    public Builder queues(List<String> queues) {
      this.queues = List.copyOf(queues);
      return this;
    }

    /**
     * The address reaches several brokers of one database (a load balancer, or a DNS name of
     * several), so that a new stream may land on another broker: brokers then even out their
     * workers by ending a movable worker's stream (UNAVAILABLE), and it reconnects.
     */
    public Builder movable(boolean movable) {
      this.movable = movable;
      return this;
    }

    /** After shutdown(), how long running jobs may take before they are cancelled (default 30 s). */
    public Builder gracePeriod(Duration d) {
      this.gracePeriod = positive(d, "grace period");
      return this;
    }

    /** After the grace period, how long to wait for the results to be stored (default 10 s). */
    public Builder finishTimeout(Duration d) {
      this.finishTimeout = positive(d, "finish timeout");
      return this;
    }

    /** How long to wait for the broker's Welcome (default 10 s). */
    public Builder connectTimeout(Duration d) {
      this.connectTimeout = positive(d, "connect timeout");
      return this;
    }

    /** The base wait before re-sending a message the broker refused as UNAVAILABLE (default 500 ms). */
    public Builder resendDelay(Duration d) {
      this.resendDelay = positive(d, "resend delay");
      return this;
    }

    /** The reconnect backoff (default: full jitter, base 200 ms, cap 30 s). */
    public Builder backoff(Backoff backoff) {
      this.backoff = Objects.requireNonNull(backoff, "backoff");
      return this;
    }

    /** The jitter source of resends, in [0, 1). */
    public Builder random(DoubleSupplier random) {
      this.random = Objects.requireNonNull(random, "random");
      return this;
    }

    /** An API token, for a broker with auth on; sent as "authorization: Bearer TOKEN". */
    public Builder token(String token) {
      this.token = token;
      return this;
    }

    /** Connect over TLS, trusting the system's CAs unless {@link #tlsCa} names others. */
    public Builder tls(boolean tls) {
      this.tls = tls;
      return this;
    }

    /** A PEM file of the CA certificates to trust for the broker's certificate (implies TLS). */
    public Builder tlsCa(String caFile) {
      this.tlsCa = caFile;
      return this;
    }

    /** A PEM client certificate and its PKCS#8 key, for a broker that requires one (implies TLS). */
    public Builder tlsClientCertificate(String certFile, String keyFile) {
      this.tlsCert = certFile;
      this.tlsKey = keyFile;
      return this;
    }

    /** The name to check the broker's certificate against, when the address is not one it holds (implies TLS). */
    public Builder tlsServerName(String serverName) {
      this.serverName = serverName;
      return this;
    }

    /** Full control of the channel's credentials; the TLS options above are then not used. */
    public Builder credentials(ChannelCredentials credentials) {
      this.credentials = Objects.requireNonNull(credentials, "credentials");
      return this;
    }

    /** Decodes payloads for typed handlers: the JSON mapper of your choice, e.g. {@code objectMapper::readValue}. */
    public Builder payloadDecoder(PayloadDecoder decoder) {
      this.decoder = Objects.requireNonNull(decoder, "decoder");
      return this;
    }

    /**
     * Encodes the values handlers give {@link JobContext#setResultValue}: the JSON mapper of your
     * choice, e.g. {@code objectMapper::writeValueAsBytes}.
     */
    public Builder resultEncoder(ResultEncoder encoder) {
      this.encoder = Objects.requireNonNull(encoder, "encoder");
      return this;
    }

    /** The clock progress reports are timed by, for tests that move it by hand. */
    Builder nanoClock(LongSupplier clock) {
      this.nanoClock = Objects.requireNonNull(clock, "clock");
      return this;
    }

    /** The least time between two progress reports of a job (default 1 s), for tests. */
    Builder progressInterval(Duration d) {
      this.progressIntervalNanos = positive(d, "progress interval").toNanos();
      return this;
    }

    /**
     * Where handlers run (default: a cached pool of daemon threads). It must run every task it
     * accepts without waiting for another to finish: at most capacity of them run at once, plus
     * handlers that ignore a cancel.
     */
    public Builder handlerExecutor(Executor executor) {
      this.handlerExecutor = Objects.requireNonNull(executor, "executor");
      return this;
    }

    /**
     * The worker. TLS files are read here, so a missing or unreadable one fails at once.
     *
     * @throws IllegalArgumentException for a setting that cannot work, naming it
     * @throws UncheckedIOException when a TLS file cannot be read
     */
    public Worker build() {
      if (workerId == null || workerId.isEmpty()) {
        workerId = hostname() + "-" + ProcessHandle.current().pid();
      }
      if (workerId.length() > 255) {
        throw new IllegalArgumentException("worker id must be 1..255 characters");
      }
      if (token != null && (token.isEmpty() || token.chars().anyMatch(Character::isWhitespace))) {
        throw new IllegalArgumentException(ConnectionSettings.ENV_TOKEN + " (token) holds white space or is empty; give the token exactly as it was printed");
      }
      if ((tlsCert == null) != (tlsKey == null)) {
        throw new IllegalArgumentException(ConnectionSettings.ENV_TLS_CERT + " and " + ConnectionSettings.ENV_TLS_KEY
            + " (tlsClientCertificate) go together: give both or neither");
      }
      if (backoff == null) {
        backoff = new Backoff();
      }
      clientCert = tlsCert != null;
      if (credentials != null) {
        usesTls = !(credentials instanceof InsecureChannelCredentials);
      } else if (tls || tlsCa != null || tlsCert != null || serverName != null) {
        usesTls = true;
        TlsChannelCredentials.Builder b = TlsChannelCredentials.newBuilder();
        try {
          if (tlsCa != null) {
            b.trustManager(new File(tlsCa));
          }
        } catch (IOException e) {
          throw new UncheckedIOException(ConnectionSettings.ENV_TLS_CA + " (tlsCa): cannot read " + tlsCa + ": " + e.getMessage(), e);
        }
        try {
          if (tlsCert != null) {
            b.keyManager(new File(tlsCert), new File(tlsKey));
          }
        } catch (IOException e) {
          throw new UncheckedIOException(ConnectionSettings.ENV_TLS_CERT + " and " + ConnectionSettings.ENV_TLS_KEY
              + ": cannot read " + tlsCert + " and " + tlsKey + ": " + e.getMessage(), e);
        }
        credentials = b.build();
      } else {
        credentials = InsecureChannelCredentials.create();
      }
      return new Worker(this);
    }

    private static Duration positive(Duration d, String what) {
      if (d == null || d.isNegative() || d.isZero()) {
        throw new IllegalArgumentException(what + " must be positive, got " + d);
      }
      return d;
    }

    private static String hostname() {
      try {
        return InetAddress.getLocalHost().getHostName();
      } catch (UnknownHostException e) {
        return "worker";
      }
    }
  }
}
