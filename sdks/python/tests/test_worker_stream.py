"""Drives the Worker against a scripted in-process broker on loopback."""

import asyncio
import threading
import unittest

import grpc
from google.protobuf import duration_pb2

from jobwire import (
    CANCEL_LEASE_LOST,
    CANCEL_REQUESTED,
    CANCEL_TIMEOUT,
    Backoff,
    JobCancelled,
    RetryAfter,
    Worker,
)
from jobwire.v1 import job_pb2, worker_service_pb2 as pb, worker_service_pb2_grpc
from jobwire.worker import _CLOSE, _Session

WAIT = 5.0  # upper bound for anything the worker should do promptly


class Stream:
    """One Connect stream as the fake broker sees it."""

    def __init__(self, context):
        self.context = context
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.outbox: asyncio.Queue = asyncio.Queue()
        self.hello = None  # the worker's Hello
        self.batches = []  # the sizes of the batch frames the worker sent

    async def recv(self, kind=None, skip_heartbeats=True):
        """The worker's next message (None once it half-closed), checked to be of kind."""
        while True:
            msg = await asyncio.wait_for(self.inbox.get(), WAIT)
            if msg is None:
                if kind is not None:
                    raise AssertionError(f"stream closed while waiting for {kind}")
                return None
            got = msg.WhichOneof("message")
            if skip_heartbeats and got == "heartbeat" and kind != "heartbeat":
                continue
            if kind is not None and got != kind:
                raise AssertionError(f"expected {kind}, got {got}: {msg}")
            return getattr(msg, got)

    def send(self, **kw):
        self.outbox.put_nowait(pb.ConnectResponse(**kw))

    def close(self):
        """End the stream cleanly from the broker's side."""
        self.outbox.put_nowait(None)

    def fail(self):
        """Break the stream with UNAVAILABLE."""
        self.outbox.put_nowait(grpc.StatusCode.UNAVAILABLE)


class FakeBroker(worker_service_pb2_grpc.WorkerServiceServicer):
    def __init__(self):
        self.streams: asyncio.Queue = asyncio.Queue()

    async def Connect(self, request_iterator, context):
        s = Stream(context)
        await self.streams.put(s)

        async def read():
            async for req in request_iterator:
                if req.HasField("hello"):
                    s.hello = req.hello
                if req.HasField("batch"):
                    # The worker's batches are unpacked here, so that tests read its messages
                    # one by one however they were framed.
                    s.batches.append(len(req.batch.messages))
                    for inner in req.batch.messages:
                        await s.inbox.put(inner)
                    continue
                await s.inbox.put(req)
            await s.inbox.put(None)

        reader = asyncio.create_task(read())
        try:
            while True:
                out = await s.outbox.get()
                if out is None:
                    return
                if isinstance(out, grpc.StatusCode):
                    await context.abort(out, "scripted failure")
                yield out
        finally:
            reader.cancel()

    async def next_stream(self) -> Stream:
        return await asyncio.wait_for(self.streams.get(), WAIT)


def dur(seconds):
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


def assignment(job_id, job_type="echo", token=None, payload=b"{}"):
    return pb.Assignment(
        job=job_pb2.Job(id=job_id, type=job_type, payload=payload, max_attempts=4),
        attempt=1,
        lease_token=token if token is not None else str(job_id * 100),
    )


def ack(job_id, token=None):
    return pb.ResultAck(
        job_id=job_id,
        lease_token=token if token is not None else str(job_id * 100),
        decision=pb.DECISION_SUCCEEDED,
    )


class BrokerTestCase(unittest.IsolatedAsyncioTestCase):
    """A scripted broker on loopback and helpers to run a worker against it."""

    async def asyncSetUp(self):
        self.broker = FakeBroker()
        self.server = grpc.aio.server()
        worker_service_pb2_grpc.add_WorkerServiceServicer_to_server(self.broker, self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        self.addr = f"127.0.0.1:{port}"
        self.release_block = threading.Event()
        self.seen_cancel = asyncio.Event()
        self.cancel_reasons = []
        self.cancel_reason = None  # what the block handler saw in ctx.cancel_reason

    async def asyncTearDown(self):
        self.release_block.set()
        await self.server.stop(None)

    def make_worker(self, **kw):
        kw.setdefault("capacity", 2)
        kw.setdefault("backoff", Backoff(base=0.01, cap=0.05))
        kw.setdefault("resend_delay", 0.01)
        kw.setdefault("worker_id", "w1")
        w = Worker(self.addr, **kw)
        loop = asyncio.get_running_loop()

        @w.handler("echo")
        def echo(ctx):
            ctx.json()

        @w.handler("fatal")
        def fatal(ctx):
            raise TypeError("wrong type")

        @w.handler("later")
        async def later(ctx):
            raise RetryAfter(7)

        @w.handler("block")
        def block(ctx):
            # Runs until the test releases it or the job is cancelled.
            while not self.release_block.wait(0.01):
                if ctx.cancelled:
                    self.cancel_reasons.append(ctx.cancel_reason)
                    self.cancel_reason = ctx.cancel_reason
                    loop.call_soon_threadsafe(self.seen_cancel.set)
                    raise JobCancelled(ctx.cancel_reason)

        return w

    async def start(self, w, heartbeat=60.0, lost=(), lease=30.0, max_result_bytes=0):
        """Run w, answer its Hello, and return (task, stream, hello)."""
        task = asyncio.create_task(w.run())
        s = await self.broker.next_stream()
        hello = await s.recv("hello")
        s.send(
            welcome=pb.Welcome(
                session_id="s1",
                lease_duration=dur(lease),
                heartbeat_interval=dur(heartbeat),
                lost=list(lost),
                max_result_bytes=max_result_bytes,
            )
        )
        return task, s, hello

    async def stop(self, w, task):
        w.shutdown()
        await asyncio.wait_for(task, WAIT)

    async def stop_and_expect_drain(self, w, task, s):
        w.shutdown()
        await s.recv("drain")
        self.assertIsNone(await s.recv())  # half-closed once nothing is held
        s.close()
        await asyncio.wait_for(task, WAIT)



class WorkerStreamTest(BrokerTestCase):
    async def test_hello_started_result_ack(self):
        w = self.make_worker(queues=("q1",))
        task, s, hello = await self.start(w)
        self.assertEqual(hello.worker_id, "w1")
        self.assertEqual(sorted(hello.job_types), ["block", "echo", "fatal", "later"])
        self.assertEqual(list(hello.queues), ["q1"])
        self.assertEqual(hello.capacity, 2)
        self.assertEqual(len(hello.held), 0)
        self.assertFalse(hello.movable)

        s.send(assignment=assignment(1))
        started = await s.recv("started")
        self.assertEqual((started.job_id, started.lease_token), (1, "100"))
        result = await s.recv("result")
        self.assertEqual((result.job_id, result.lease_token), (1, "100"))
        self.assertTrue(result.HasField("success"))
        s.send(result_ack=ack(1))

        await self.stop_and_expect_drain(w, task, s)

    async def test_batches_both_ways(self):
        w = self.make_worker(capacity=3)
        task, s, hello = await self.start(w)
        self.addCleanup(task.cancel)  # a failed assertion must not leave the worker running
        self.assertTrue(hello.accepts_batches)
        # Three assignments in one frame: their Started messages are queued at the same moment
        # and leave as one batch, before any handler's result.
        s.send(batch=pb.ConnectResponseBatch(messages=[pb.ConnectResponse(assignment=assignment(i)) for i in (1, 2, 3)]))
        started = [await s.recv("started") for _ in range(3)]
        self.assertEqual([m.job_id for m in started], [1, 2, 3])
        self.assertEqual(s.batches[0], 3)
        results = {}
        while len(results) < 3:
            r = await s.recv("result")
            results[r.job_id] = r
        self.assertTrue(all(r.HasField("success") for r in results.values()))
        # The acks in one frame free all three slots.
        s.send(batch=pb.ConnectResponseBatch(messages=[pb.ConnectResponse(result_ack=ack(i)) for i in (1, 2, 3)]))
        await self.stop_and_expect_drain(w, task, s)
        self.assertTrue(all(1 <= n <= 1024 for n in s.batches))

    async def test_a_lone_message_is_not_wrapped(self):
        w = self.make_worker()
        task, s, _ = await self.start(w)
        self.addCleanup(task.cancel)
        s.send(assignment=assignment(1))
        await s.recv("started")
        await s.recv("result")
        s.send(result_ack=ack(1))
        await self.stop_and_expect_drain(w, task, s)
        self.assertEqual(s.batches, [])

    async def written(self, msgs):
        """What the write loop makes of msgs, queued at once: a batch frame as its size, any
        other message as its kind."""

        class Call:
            def __init__(self):
                self.writes = []

            async def write(self, msg):
                which = msg.WhichOneof("message")
                self.writes.append(len(msg.batch.messages) if which == "batch" else which)

            async def done_writing(self):
                self.writes.append("half-close")

        sess = _Session(call=Call())
        for msg in msgs:
            sess.queue.put_nowait(msg)
        await asyncio.wait_for(self.make_worker()._write_loop(sess), WAIT)
        return sess.call.writes

    async def test_no_batch_holds_more_than_1024_messages_and_drain_goes_alone(self):
        started = [pb.ConnectRequest(started=pb.Started(job_id=i, lease_token="t")) for i in range(2049)]
        writes = await self.written([*started, pb.ConnectRequest(drain=pb.Drain()), started[0], _CLOSE])
        self.assertEqual(writes, [1024, 1024, "started", "drain", "started", "half-close"])

    async def test_no_batch_gathers_more_than_a_mebibyte(self):
        # Results near the result limit that are ready together go one by one; smaller ones
        # share frames up to 1 MiB, and a frame never reaches what the broker refuses.
        def result(n):
            return pb.ConnectRequest(result=pb.Result(job_id=1, lease_token="t", success=pb.Success(result=b"x" * n)))

        msgs = [result(900 << 10), result(900 << 10), result(300 << 10), result(300 << 10), result(300 << 10),
                result(300 << 10), pb.ConnectRequest(started=pb.Started(job_id=2, lease_token="t")), _CLOSE]
        self.assertEqual(await self.written(msgs), ["result", "result", 3, 2, "half-close"])

    async def test_movable_worker_says_so_in_hello(self):
        w = self.make_worker(movable=True)
        task, s, hello = await self.start(w)
        self.assertTrue(hello.movable)
        await self.stop_and_expect_drain(w, task, s)

    async def test_handler_sees_metadata_and_trace_context(self):
        w = self.make_worker()
        seen = {}

        @w.handler("traced")
        def traced(ctx):
            seen["metadata"] = dict(ctx.metadata)
            seen["traceparent"] = ctx.traceparent

        task, s, _ = await self.start(w)
        a = assignment(3, job_type="traced")
        parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        a.job.metadata["traceparent"] = parent
        a.job.metadata["tenant"] = "acme"
        s.send(assignment=a)
        await s.recv("started")
        result = await s.recv("result")
        self.assertTrue(result.HasField("success"))
        s.send(result_ack=ack(3))
        self.assertEqual(seen["metadata"], {"traceparent": parent, "tenant": "acme"})
        self.assertEqual(seen["traceparent"], parent)
        await self.stop_and_expect_drain(w, task, s)

    async def test_failures_are_classified(self):
        w = self.make_worker(capacity=3)
        task, s, _ = await self.start(w)
        s.send(assignment=assignment(1, "fatal"))
        s.send(assignment=assignment(2, "later"))
        s.send(assignment=assignment(3, "echo", payload=b"{not json"))
        got = {}
        started = set()
        while len(got) < 3:
            msg = await s.recv()
            if isinstance(msg, pb.Started):
                started.add(msg.job_id)
                continue
            self.assertIsInstance(msg, pb.Result)
            r = msg
            self.assertIn(r.job_id, started, "Result before Started")
            got[r.job_id] = r.failure
            s.send(result_ack=ack(r.job_id))
        self.assertEqual(got[1].kind, job_pb2.FAILURE_KIND_FATAL)
        self.assertEqual(got[1].error_type, "TypeError")
        self.assertEqual(got[1].message, "wrong type")
        self.assertIn("Traceback", got[1].details)
        self.assertEqual(got[2].kind, job_pb2.FAILURE_KIND_TRANSIENT)
        self.assertEqual(got[2].error_type, "RetryAfter")
        self.assertEqual(got[2].retry_after.ToNanoseconds(), 7 * 10**9)
        self.assertEqual(got[3].kind, job_pb2.FAILURE_KIND_FATAL)
        self.assertEqual(got[3].error_type, "JSONDecodeError")
        await self.stop_and_expect_drain(w, task, s)

    async def test_result_resent_after_unavailable(self):
        w = self.make_worker()
        task, s, _ = await self.start(w)
        s.send(assignment=assignment(1))
        await s.recv("started")
        first = await s.recv("result")
        s.send(
            refused=pb.Refused(
                job_id=1, lease_token="100", refused_message=pb.REFUSED_MESSAGE_RESULT, code=14
            )
        )
        again = await s.recv("result")
        self.assertEqual(again, first)
        s.send(result_ack=ack(1))
        await self.stop_and_expect_drain(w, task, s)

    async def test_failed_precondition_drops_result(self):
        w = self.make_worker()
        task, s, _ = await self.start(w)
        s.send(assignment=assignment(1))
        await s.recv("started")
        await s.recv("result")
        s.send(
            refused=pb.Refused(
                job_id=1, lease_token="100", refused_message=pb.REFUSED_MESSAGE_RESULT, code=9
            )
        )
        # Dropping frees the slot, so shutdown completes without a ResultAck.
        await self.stop_and_expect_drain(w, task, s)

    async def test_cancel_reaches_handler_and_sends_no_result(self):
        w = self.make_worker()
        task, s, _ = await self.start(w)
        s.send(assignment=assignment(1, "block"))
        await s.recv("started")
        s.send(cancel=pb.Cancel(job_id=1, lease_token="100", reason=pb.CANCEL_REASON_TIMEOUT))
        await asyncio.wait_for(self.seen_cancel.wait(), WAIT)
        self.assertEqual(self.cancel_reason, CANCEL_TIMEOUT)
        # The next message is the Drain, not a Result for the cancelled job.
        await self.stop_and_expect_drain(w, task, s)

    async def test_requested_cancel_says_so(self):
        w = self.make_worker()
        task, s, _ = await self.start(w)
        s.send(assignment=assignment(1, "block"))
        await s.recv("started")
        s.send(cancel=pb.Cancel(job_id=1, lease_token="100", reason=pb.CANCEL_REASON_REQUESTED))
        await asyncio.wait_for(self.seen_cancel.wait(), WAIT)
        self.assertEqual(self.cancel_reason, CANCEL_REQUESTED)
        await self.stop_and_expect_drain(w, task, s)

    async def test_attempt_timeout_stops_handler_and_reports_timed_out(self):
        w = self.make_worker()
        task, s, _ = await self.start(w)
        a = assignment(1, "block")
        a.attempt_timeout.FromMilliseconds(50)
        s.send(assignment=a)
        await s.recv("started")
        await asyncio.wait_for(self.seen_cancel.wait(), WAIT)
        result = await s.recv("result")
        f = result.failure
        self.assertTrue(f.timed_out)
        self.assertEqual(f.kind, job_pb2.FAILURE_KIND_TRANSIENT)
        self.assertEqual(f.error_type, "JobCancelled")
        s.send(result_ack=ack(1))
        await self.stop_and_expect_drain(w, task, s)

    async def test_over_capacity_assignment_is_released(self):
        w = self.make_worker(capacity=1)
        task, s, _ = await self.start(w)
        s.send(assignment=assignment(1, "block"))
        await s.recv("started")
        s.send(assignment=assignment(2, "echo"))
        rel = await s.recv("release")
        self.assertEqual((rel.job_id, rel.lease_token), (2, "200"))
        self.release_block.set()
        await s.recv("result")
        s.send(result_ack=ack(1))
        await self.stop_and_expect_drain(w, task, s)

    async def test_heartbeats_name_held_leases(self):
        w = self.make_worker()
        task, s, _ = await self.start(w, heartbeat=0.02)
        s.send(assignment=assignment(1, "block"))
        await s.recv("started")
        hb = await s.recv("heartbeat")
        while not hb.leases:
            hb = await s.recv("heartbeat")
        self.assertEqual([(l.job_id, l.lease_token) for l in hb.leases], [(1, "100")])
        self.release_block.set()
        await s.recv("result")
        s.send(result_ack=ack(1))
        await self.stop_and_expect_drain(w, task, s)

    async def test_reconnect_sends_held_and_resends_result(self):
        w = self.make_worker()
        task, s, _ = await self.start(w)
        s.send(assignment=assignment(1, "block"))
        await s.recv("started")
        s.fail()

        s2 = await self.broker.next_stream()
        hello = await s2.recv("hello")
        self.assertEqual([(l.job_id, l.lease_token) for l in hello.held], [(1, "100")])
        s2.send(welcome=pb.Welcome(session_id="s2", lease_duration=dur(30), heartbeat_interval=dur(60)))
        # The first Started may have been lost with the stream: the job still runs, so it comes again.
        self.assertEqual((await s2.recv("started")).job_id, 1)
        self.release_block.set()
        r = await s2.recv("result")
        self.assertEqual(r.job_id, 1)

        # The ack is lost with the stream: the result comes again on the next one.
        s2.fail()
        s3 = await self.broker.next_stream()
        hello = await s3.recv("hello")
        self.assertEqual([(l.job_id, l.lease_token) for l in hello.held], [(1, "100")])
        s3.send(welcome=pb.Welcome(session_id="s3", lease_duration=dur(30), heartbeat_interval=dur(60)))
        self.assertEqual(await s3.recv("result"), r)
        s3.send(result_ack=ack(1))
        await self.stop_and_expect_drain(w, task, s3)

    async def test_lost_lease_on_reconnect_cancels_job(self):
        w = self.make_worker()
        task, s, _ = await self.start(w)
        s.send(assignment=assignment(1, "block"))
        await s.recv("started")
        s.fail()
        s2 = await self.broker.next_stream()
        await s2.recv("hello")
        s2.send(
            welcome=pb.Welcome(
                session_id="s2",
                lease_duration=dur(30),
                heartbeat_interval=dur(60),
                lost=[pb.LeaseRef(job_id=1, lease_token="100")],
            )
        )
        await asyncio.wait_for(self.seen_cancel.wait(), WAIT)
        self.assertEqual(self.cancel_reason, CANCEL_LEASE_LOST)
        await self.stop_and_expect_drain(w, task, s2)

    async def test_shutdown_lets_running_job_finish_and_releases_new_work(self):
        w = self.make_worker()
        task, s, _ = await self.start(w)
        s.send(assignment=assignment(1, "block"))
        await s.recv("started")
        w.shutdown()
        await s.recv("drain")
        # An assignment that crossed the Drain on the wire is handed back unstarted.
        s.send(assignment=assignment(2, "echo"))
        rel = await s.recv("release")
        self.assertEqual(rel.job_id, 2)
        self.release_block.set()
        r = await s.recv("result")
        self.assertTrue(r.HasField("success"))
        s.send(result_ack=ack(1))
        self.assertIsNone(await s.recv())
        s.close()
        await asyncio.wait_for(task, WAIT)

    async def test_grace_period_cancels_stuck_jobs(self):
        w = self.make_worker(grace_period=0.05)
        task, s, _ = await self.start(w)
        s.send(assignment=assignment(1, "block"))
        await s.recv("started")
        w.shutdown()
        await s.recv("drain")
        r = await s.recv("result")
        self.assertEqual(r.failure.kind, job_pb2.FAILURE_KIND_TRANSIENT)
        self.assertEqual(r.failure.error_type, "WorkerShutdown")
        s.send(result_ack=ack(1))
        self.assertIsNone(await s.recv())
        s.close()
        await asyncio.wait_for(task, WAIT)

    async def test_broker_drain_request_closes_stream_then_reconnects(self):
        w = self.make_worker()
        task, s, _ = await self.start(w)
        s.send(drain=pb.DrainRequest(reason="broker restarting"))
        self.assertIsNone(await s.recv())
        s.close()
        s2 = await self.broker.next_stream()
        await s2.recv("hello")
        s2.send(welcome=pb.Welcome(session_id="s2", lease_duration=dur(30), heartbeat_interval=dur(60)))
        await self.stop_and_expect_drain(w, task, s2)

    async def test_invalid_argument_stops_run(self):
        w = self.make_worker()
        task = asyncio.create_task(w.run())
        s = await self.broker.next_stream()
        await s.recv("hello")
        s.outbox.put_nowait(grpc.StatusCode.INVALID_ARGUMENT)
        with self.assertRaises(grpc.aio.AioRpcError) as cm:
            await asyncio.wait_for(task, WAIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)


if __name__ == "__main__":
    unittest.main()


class SecurityOptionsTest(BrokerTestCase):
    """The token and TLS options. Connecting over TLS and mutual TLS to the real broker is
    covered by the conformance suite (scenarios tls_token and mtls_token), which writes throwaway certificates."""

    async def test_token_is_sent_as_bearer_metadata(self):
        w = self.make_worker(token="jw_abc_secret")
        task, s, _ = await self.start(w)
        metadata = dict(s.context.invocation_metadata())
        self.assertEqual(metadata.get("authorization"), "Bearer jw_abc_secret")
        await self.stop_and_expect_drain(w, task, s)

    async def test_no_token_sends_no_authorization(self):
        w = self.make_worker()
        task, s, _ = await self.start(w)
        self.assertNotIn("authorization", dict(s.context.invocation_metadata()))
        await self.stop_and_expect_drain(w, task, s)

    async def test_unauthenticated_is_permanent(self):
        w = self.make_worker(token="jw_revoked")
        task = asyncio.create_task(w.run())
        s = await self.broker.next_stream()
        await s.recv("hello")
        s.outbox.put_nowait(grpc.StatusCode.UNAUTHENTICATED)
        with self.assertRaises(grpc.aio.AioRpcError) as cm:
            await asyncio.wait_for(task, WAIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAUTHENTICATED)

    def test_bad_options_fail_at_once(self):
        with self.assertRaises(ValueError):
            Worker(self_addr(), token="two words")
        with self.assertRaises(ValueError):
            Worker(self_addr(), tls_cert="client.pem")
        with self.assertRaises(FileNotFoundError):
            Worker(self_addr(), tls_ca="/nonexistent/ca.pem")


def self_addr():
    return "127.0.0.1:1"
