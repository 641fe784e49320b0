package io.jobwire.worker;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import jobwire.v1.JobOuterClass.Job;
import jobwire.v1.WorkerServiceOuterClass.Assignment;

/**
 * The job a handler runs, and how it learns of a cancel.
 *
 * <p>Cancellation reaches the handler two ways at once: the handler's thread is <b>interrupted</b>
 * (so {@code Thread.sleep}, blocking queues, {@code Future.get} and interruptible I/O stop with
 * an {@link InterruptedException}), and this context says so ({@link #isCancelled()}, {@link
 * #cancelReason()}, {@link #awaitCancelled}, {@link #onCancel}). The library never stops a
 * handler by force. After a cancel from the broker (or a lease lost) the job's outcome is already
 * settled there, so whatever the handler returns or throws is dropped; after an attempt timeout
 * or the shutdown grace, it is reported as a timeout or a transient {@code WorkerShutdown}.
 */
public final class JobContext {
  private final Job job;
  private final Assignment assignment;
  private final byte[] payload;
  private final CountDownLatch cancelled = new CountDownLatch(1);
  private volatile CancelReason reason;
  // Guarded by this: the thread running the handler, to interrupt, and the cancel callbacks.
  private Thread thread;
  private List<Runnable> onCancel = new ArrayList<>();
  private final ResultEncoder encoder;
  private volatile byte[] result;
  /** Where progress reports go: the worker's throttle for this job; set before the handler runs. */
  private volatile ProgressSink progressSink;

  /** Takes a checked report: a fraction (NaN when unknown) and a message already cut to size. */
  interface ProgressSink {
    void report(double fraction, String message);
  }

  /** The longest progress message the broker takes, in bytes of UTF-8 (Progress.message). */
  static final int MAX_PROGRESS_MESSAGE_BYTES = 256;

  JobContext(Assignment assignment) {
    this(assignment, null);
  }

  JobContext(Assignment assignment, ResultEncoder encoder) {
    this.assignment = assignment;
    this.job = assignment.getJob();
    this.payload = job.getPayload().toByteArray();
    this.encoder = encoder;
  }

  void progressSink(ProgressSink sink) {
    this.progressSink = sink;
  }

  /** The result set by the handler, or null. */
  byte[] result() {
    return result;
  }

  /** The job's id. */
  public long id() {
    return job.getId();
  }

  public String type() {
    return job.getType();
  }

  public String queue() {
    return job.getQueue();
  }

  /** The payload's bytes, exactly as the producer enqueued them. */
  public byte[] payload() {
    return payload.clone();
  }

  /** The payload as UTF-8 text. */
  public String payloadText() {
    return new String(payload, StandardCharsets.UTF_8);
  }

  /** This attempt's number, starting at 1. */
  public int attempt() {
    return assignment.getAttempt();
  }

  public int maxAttempts() {
    return job.getMaxAttempts();
  }

  /** The lease's fencing token: opaque, compare it for equality only. */
  public String leaseToken() {
    return assignment.getLeaseToken();
  }

  /**
   * How long this attempt may run, if the broker set a limit. The worker cancels the handler
   * (reason {@link CancelReason#TIMEOUT}) once it has passed.
   */
  public Optional<Duration> attemptTimeout() {
    if (!assignment.hasAttemptTimeout()) {
      return Optional.empty();
    }
    Duration d = Failures.fromProto(assignment.getAttemptTimeout());
    return d.isZero() ? Optional.empty() : Optional.of(d);
  }

  /**
   * What the producer attached to the job: its own keys, and the W3C trace context of the
   * enqueue under "traceparent" and "tracestate".
   */
  public Map<String, String> metadata() {
    return job.getMetadataMap();
  }

  /** The producer's W3C traceparent, if the job carries one. */
  public Optional<String> traceparent() {
    return Optional.ofNullable(job.getMetadataMap().get("traceparent"));
  }

  /**
   * The results of the jobs this one depends on, in the order the producer named them; empty for
   * a job without parents.
   */
  public List<ParentResult> parentResults() {
    List<ParentResult> out = new ArrayList<>(assignment.getParentResultsCount());
    for (jobwire.v1.WorkerServiceOuterClass.ParentResult p : assignment.getParentResultsList()) {
      out.add(new ParentResult(p.getJobId(), p.getType(), p.getResult().toByteArray(), p.getState()));
    }
    return List.copyOf(out);
  }

  /**
   * Sets the job's result, sent with its success. A result larger than the broker's limit
   * (Welcome.max_result_bytes) fails the attempt as FATAL, error type {@code ResultTooLarge}.
   */
  public void setResult(byte[] bytes) {
    this.result = bytes.clone();
  }

  /** Sets the job's result to text, as UTF-8. */
  public void setResultText(String text) {
    this.result = text.getBytes(StandardCharsets.UTF_8);
  }

  /**
   * Sets the job's result to a value encoded by the builder's {@link ResultEncoder} (JSON, with
   * the mapper you chose). A value it cannot encode, or a worker built without one, throws a {@link
   * ResultException}: FATAL, since a retry would fail the same way.
   */
  public void setResultValue(Object value) {
    if (encoder == null) {
      throw new ResultException("job " + id() + ": result values need a result encoder: Worker.builder().resultEncoder(mapper::writeValueAsBytes)", null);
    }
    try {
      this.result = encoder.encode(value);
    } catch (Exception e) {
      throw new ResultException("job " + id() + ": the result could not be encoded", e);
    }
  }

  /**
   * Reports how far the job got: a fraction from 0 to 1 and a short message (cut to 256 bytes of
   * UTF-8). Call it as often as you like: the worker sends at most one report per second, the
   * last one always, and none after the job's result.
   *
   * @throws IllegalArgumentException for a fraction outside 0..1 (FATAL if it leaves the handler)
   */
  public void progress(double fraction, String message) {
    if (!(fraction >= 0 && fraction <= 1)) {
      throw new IllegalArgumentException("progress fraction " + fraction + " is not between 0 and 1");
    }
    report(fraction, message);
  }

  /** Reports a fraction from 0 to 1 alone; see {@link #progress(double, String)}. */
  public void progress(double fraction) {
    progress(fraction, "");
  }

  /** Reports a message alone, when the job cannot say how far it got; see {@link #progress(double, String)}. */
  public void progress(String message) {
    report(Double.NaN, message);
  }

  private void report(double fraction, String message) {
    ProgressSink sink = progressSink;
    if (sink != null) {
      sink.report(fraction, clip(message == null ? "" : message));
    }
  }

  /** message cut to MAX_PROGRESS_MESSAGE_BYTES of UTF-8 at a character: better shortened than refused. */
  static String clip(String message) {
    byte[] b = message.getBytes(StandardCharsets.UTF_8);
    if (b.length <= MAX_PROGRESS_MESSAGE_BYTES) {
      return message;
    }
    int end = MAX_PROGRESS_MESSAGE_BYTES;
    while (end > 0 && (b[end] & 0xc0) == 0x80) {
      end--; // back to the start of a character
    }
    return new String(b, 0, end, StandardCharsets.UTF_8);
  }

  /** Whether the job was cancelled; {@link #cancelReason()} says why. */
  public boolean isCancelled() {
    return cancelled.getCount() == 0;
  }

  /** Why the job was cancelled, once it was. */
  public Optional<CancelReason> cancelReason() {
    return Optional.ofNullable(reason);
  }

  /** Throws {@link JobCancelledException} if the job was cancelled. */
  public void throwIfCancelled() {
    CancelReason r = reason;
    if (r != null) {
      throw new JobCancelledException(id(), r);
    }
  }

  /**
   * Blocks until the job is cancelled and returns why. The interrupt the cancel delivered to this
   * thread is consumed, so that what the handler does next (write a file, report) is not cut short.
   *
   * @throws InterruptedException when the thread is interrupted for another reason
   */
  public CancelReason awaitCancelled() throws InterruptedException {
    try {
      cancelled.await();
    } catch (InterruptedException e) {
      if (!isCancelled()) {
        throw e;
      }
    }
    consumeInterrupt();
    return reason;
  }

  /**
   * Blocks until the job is cancelled or the timeout passes; returns whether it was cancelled. A
   * cancel's interrupt is consumed, as by {@link #awaitCancelled()}.
   */
  public boolean awaitCancelled(Duration timeout) throws InterruptedException {
    boolean done;
    try {
      done = cancelled.await(timeout.toNanos(), TimeUnit.NANOSECONDS);
    } catch (InterruptedException e) {
      if (!isCancelled()) {
        throw e;
      }
      done = true;
    }
    if (done) {
      consumeInterrupt();
    }
    return done;
  }

  /**
   * Sleeps for d, ending early with a {@link JobCancelledException} if the job is cancelled (the
   * cancel's interrupt consumed).
   */
  public void sleep(Duration d) throws InterruptedException {
    if (awaitCancelled(d)) {
      throwIfCancelled();
    }
  }

  /** Clears the interrupt a cancel delivered: cancel() interrupts while holding the lock. */
  private void consumeInterrupt() {
    boolean handlerThread;
    synchronized (this) { // waits for cancel() to have interrupted the handler's thread
      handlerThread = thread == Thread.currentThread();
    }
    if (handlerThread) {
      Thread.interrupted();
    }
  }

  /**
   * Runs r once the job is cancelled (at once if it already is), on the thread that cancels it:
   * keep it short, e.g. close a socket or abort a request.
   */
  public void onCancel(Runnable r) {
    synchronized (this) {
      if (onCancel != null) {
        onCancel.add(r);
        return;
      }
    }
    r.run();
  }

  /** Signals cancellation: once, whatever comes after. */
  void cancel(CancelReason why) {
    List<Runnable> callbacks;
    synchronized (this) {
      if (onCancel == null) {
        return;
      }
      reason = why;
      cancelled.countDown();
      callbacks = onCancel;
      onCancel = null;
      if (thread != null) {
        thread.interrupt();
      }
    }
    for (Runnable r : callbacks) {
      try {
        r.run();
      } catch (RuntimeException e) {
        System.getLogger(Worker.LOGGER).log(System.Logger.Level.WARNING, "job " + id() + ": an onCancel callback threw", e);
      }
    }
  }

  /** Binds the handler's thread, to interrupt on cancel; an already cancelled job interrupts it at once. */
  synchronized void bind(Thread t) {
    thread = t;
    if (onCancel == null) {
      t.interrupt();
    }
  }

  /**
   * Unbinds the handler's thread once it returned, clearing an interrupt meant for this job so
   * that it cannot reach the next job the thread runs.
   */
  void unbind() {
    synchronized (this) {
      thread = null;
    }
    Thread.interrupted();
  }
}
