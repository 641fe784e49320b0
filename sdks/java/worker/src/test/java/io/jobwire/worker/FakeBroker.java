package io.jobwire.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.fail;

import com.google.protobuf.ByteString;
import io.grpc.Grpc;
import io.grpc.InsecureServerCredentials;
import io.grpc.Server;
import io.grpc.Status;
import io.grpc.stub.StreamObserver;
import java.io.IOException;
import java.time.Duration;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import jobwire.v1.JobOuterClass.Job;
import jobwire.v1.WorkerServiceGrpc;
import jobwire.v1.WorkerServiceOuterClass.Assignment;
import jobwire.v1.WorkerServiceOuterClass.ConnectRequest;
import jobwire.v1.WorkerServiceOuterClass.ConnectResponse;
import jobwire.v1.WorkerServiceOuterClass.Welcome;

/** A scripted broker on loopback: each Connect stream the worker opens is handed to the test. */
final class FakeBroker implements AutoCloseable {
  /** A first attempt of job id, as the broker assigns it. */
  static ConnectResponse assignment(long id, String type, String payload, String token) {
    return ConnectResponse.newBuilder()
        .setAssignment(Assignment.newBuilder()
            .setJob(Job.newBuilder().setId(id).setType(type).setPayload(ByteString.copyFromUtf8(payload)).setMaxAttempts(3))
            .setAttempt(1)
            .setLeaseToken(token))
        .build();
  }

  /** Upper bound for anything the worker should do promptly. */
  static final long WAIT_SECONDS = 10;

  private final BlockingQueue<Stream> streams = new LinkedBlockingQueue<>();
  private final Server server;

  FakeBroker() throws IOException {
    server = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create())
        .addService(new WorkerServiceGrpc.WorkerServiceImplBase() {
          @Override
          public StreamObserver<ConnectRequest> connect(StreamObserver<ConnectResponse> out) {
            Stream s = new Stream(out);
            streams.add(s);
            return s.observer;
          }
        })
        .build()
        .start();
  }

  String address() {
    return "127.0.0.1:" + server.getPort();
  }

  /** The next stream the worker opens. */
  Stream accept() throws InterruptedException {
    Stream s = streams.poll(WAIT_SECONDS, TimeUnit.SECONDS);
    assertNotNull(s, "the worker opened no stream");
    return s;
  }

  @Override
  public void close() throws InterruptedException {
    server.shutdownNow().awaitTermination(WAIT_SECONDS, TimeUnit.SECONDS);
  }

  /** One Connect stream as the broker sees it. */
  static final class Stream {
    /** Marks the worker's half-close in the inbox. */
    private static final ConnectRequest CLOSED = ConnectRequest.getDefaultInstance();

    /** The worker's messages one by one, batch frames unpacked. */
    final BlockingQueue<ConnectRequest> inbox = new LinkedBlockingQueue<>();
    /** The worker's gRPC messages as they came, batch frames whole. */
    final BlockingQueue<ConnectRequest> frames = new LinkedBlockingQueue<>();
    private final StreamObserver<ConnectResponse> out;
    final StreamObserver<ConnectRequest> observer = new StreamObserver<>() {
      @Override
      public void onNext(ConnectRequest m) {
        frames.add(m);
        if (m.hasBatch()) {
          inbox.addAll(m.getBatch().getMessagesList());
        } else {
          inbox.add(m);
        }
      }

      @Override
      public void onError(Throwable t) {
        inbox.add(CLOSED);
      }

      @Override
      public void onCompleted() {
        inbox.add(CLOSED);
      }
    };

    Stream(StreamObserver<ConnectResponse> out) {
      this.out = out;
    }

    /** The worker's next message, heartbeats skipped unless asked for; null once it half-closed. */
    ConnectRequest recv(ConnectRequest.MessageCase kind) throws InterruptedException {
      for (;;) {
        ConnectRequest m = inbox.poll(WAIT_SECONDS, TimeUnit.SECONDS);
        if (m == null) {
          fail("timed out waiting for " + kind);
        }
        if (m == CLOSED) {
          if (kind != null) {
            fail("the stream closed while waiting for " + kind);
          }
          return null;
        }
        if (m.hasHeartbeat() && kind != ConnectRequest.MessageCase.HEARTBEAT) {
          continue;
        }
        if (kind != null) {
          assertEquals(kind, m.getMessageCase(), () -> "got " + m);
        }
        return m;
      }
    }

    /** The worker's next gRPC message after the Hello, lone heartbeats skipped. */
    ConnectRequest frame() throws InterruptedException {
      for (;;) {
        ConnectRequest m = frames.poll(WAIT_SECONDS, TimeUnit.SECONDS);
        assertNotNull(m, "timed out waiting for a message");
        if (!m.hasHello() && !m.hasHeartbeat()) {
          return m;
        }
      }
    }

    void send(ConnectResponse m) {
      synchronized (out) {
        out.onNext(m);
      }
    }

    void welcome(Duration lease, Duration heartbeat) {
      send(ConnectResponse.newBuilder()
          .setWelcome(Welcome.newBuilder()
              .setSessionId("s")
              .setLeaseDuration(Failures.toProto(lease))
              .setHeartbeatInterval(Failures.toProto(heartbeat)))
          .build());
    }

    /** Hands the worker job id of type with payload, under lease token. */
    void assign(long id, String type, String payload, String token) {
      send(assignment(id, type, payload, token));
    }

    void assign(Assignment a) {
      send(ConnectResponse.newBuilder().setAssignment(a).build());
    }

    /** Ends the stream cleanly. */
    void close() {
      synchronized (out) {
        out.onCompleted();
      }
    }

    /** Breaks the stream with a status. */
    void breakWith(Status status) {
      synchronized (out) {
        out.onError(status.asRuntimeException());
      }
    }
  }
}
