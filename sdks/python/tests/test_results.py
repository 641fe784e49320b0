"""Results, progress and parents' results: the throttle on a clock moved by hand, and the worker
against the scripted broker of test_worker_stream."""

import asyncio
import json
import threading
import unittest

from jobwire import ParentResult
from jobwire.context import JobContext
from jobwire.progress import ProgressThrottle, check_fraction, clip_message
from jobwire.v1 import job_pb2, worker_service_pb2 as pb

from tests.test_worker_stream import WAIT, BrokerTestCase, ack, assignment


class ProgressThrottleTest(unittest.TestCase):
    def test_first_goes_at_once_then_one_a_second_and_the_last_always(self):
        t = ProgressThrottle(interval=1.0)
        self.assertEqual(t.offer(10.0, "a"), ("a", None))
        # Within the second: held back, one flush scheduled for when the second is over.
        self.assertEqual(t.offer(10.2, "b"), (None, 11.0))
        self.assertEqual(t.offer(10.5, "c"), (None, None))
        self.assertEqual(t.due(11.0), "c")  # the newest, not the first held back
        self.assertIsNone(t.due(11.0))  # nothing waits any more
        self.assertEqual(t.offer(12.5, "d"), ("d", None))  # a second after the last send

    def test_close_hands_over_what_was_held_back_then_nothing(self):
        t = ProgressThrottle(interval=1.0)
        t.offer(0.0, "a")
        self.assertEqual(t.offer(0.5, "b"), (None, 1.0))
        self.assertEqual(t.close(), "b")  # the result goes next: b right before it
        self.assertIsNone(t.due(1.0))
        self.assertEqual(t.offer(5.0, "c"), (None, None))
        self.assertIsNone(t.close())

    def test_fraction_and_message_are_checked(self):
        self.assertIsNone(check_fraction(None))
        self.assertEqual(check_fraction(1), 1.0)
        for bad in (-0.1, 1.5, float("nan")):
            with self.assertRaisesRegex(ValueError, "not between 0 and 1"):
                check_fraction(bad)
        self.assertEqual(clip_message("short"), "short")
        long = "é" * 200  # 400 bytes
        clipped = clip_message(long)
        self.assertLessEqual(len(clipped.encode()), 256)
        self.assertEqual(clipped, "é" * 128)


class ParentResultsTest(unittest.TestCase):
    def test_parents_in_order_with_state(self):
        a = pb.Assignment(
            job=job_pb2.Job(id=3, type="report"),
            parent_results=[
                pb.ParentResult(job_id=1, type="fetch", result=b'{"rows":2}', state=job_pb2.JOB_STATE_SUCCEEDED),
                pb.ParentResult(job_id=2, type="fetch", state=job_pb2.JOB_STATE_DEAD),
            ],
        )
        ctx = JobContext(a)
        self.assertEqual(
            ctx.parent_results,
            [ParentResult(1, "fetch", b'{"rows":2}', "succeeded"), ParentResult(2, "fetch", b"", "dead")],
        )
        self.assertEqual(ctx.parent_results[0].json(), {"rows": 2})
        self.assertEqual(JobContext(pb.Assignment(job=job_pb2.Job(id=4))).parent_results, [])


class ResultsStreamTest(BrokerTestCase):
    def make_worker(self, **kw):
        w = super().make_worker(**kw)
        self.progress_go = threading.Event()
        self.progress_sent = threading.Event()

        @w.handler("value")
        def value(ctx):
            return ctx.json()["return"]

        @w.handler("set")
        async def set_result(ctx):
            ctx.set_result(b"\x00raw")

        @w.handler("steps")
        def steps(ctx):
            for i in range(1, 6):
                ctx.progress(i / 5, f"step {i}")
            self.progress_sent.set()
            self.progress_go.wait(WAIT)
            return "done"

        return w

    async def run_one(self, s, job_type, payload=b"{}", job_id=1):
        s.send(assignment=assignment(job_id, job_type, payload=payload))
        await s.recv("started")
        r = await s.recv("result")
        s.send(result_ack=ack(job_id))
        return r

    async def test_returned_and_set_results_are_sent(self):
        w = self.make_worker()
        task, s, _ = await self.start(w, max_result_bytes=64)
        self.addCleanup(task.cancel)
        r = await self.run_one(s, "value", json.dumps({"return": {"n": 1}}).encode(), 1)
        self.assertEqual(r.success.result, b'{"n":1}')  # a value as JSON
        r = await self.run_one(s, "value", json.dumps({"return": "text"}).encode(), 2)
        self.assertEqual(r.success.result, b"text")  # str as UTF-8
        r = await self.run_one(s, "set", job_id=3)
        self.assertEqual(r.success.result, b"\x00raw")
        r = await self.run_one(s, "echo", job_id=4)  # returns None: no result
        self.assertTrue(r.HasField("success"))
        self.assertEqual(r.success.result, b"")
        await self.stop_and_expect_drain(w, task, s)

    async def test_a_result_over_the_brokers_limit_is_a_fatal_result_too_large(self):
        w = self.make_worker()
        task, s, _ = await self.start(w, max_result_bytes=8)
        self.addCleanup(task.cancel)
        r = await self.run_one(s, "value", json.dumps({"return": "x" * 9}).encode())
        self.assertEqual(r.failure.kind, job_pb2.FAILURE_KIND_FATAL)
        self.assertEqual(r.failure.error_type, "ResultTooLarge")
        self.assertIn("9 bytes", r.failure.message)
        self.assertIn("limit of 8 bytes", r.failure.message)
        r = await self.run_one(s, "value", json.dumps({"return": "x" * 8}).encode(), 2)
        self.assertEqual(r.success.result, b"x" * 8)  # the limit itself is fine
        await self.stop_and_expect_drain(w, task, s)

    async def test_progress_is_throttled_the_last_report_sent_and_none_after_the_result(self):
        w = self.make_worker()
        w._clock = lambda: 100.0  # the throttle's clock stands still: reports 2..5 are within the interval
        w._progress_interval = 3600.0  # so their flush runs when the test runs it, not on its own
        task, s, _ = await self.start(w)
        self.addCleanup(task.cancel)
        s.send(assignment=assignment(1, "steps"))
        await s.recv("started")
        first = await s.recv("progress")
        self.assertEqual((first.job_id, first.lease_token, first.fraction, first.message), (1, "100", 0.2, "step 1"))
        await asyncio.wait_for(asyncio.to_thread(self.progress_sent.wait, WAIT), WAIT)
        # Reports 2..5 were held back, and one flush armed for the end of the interval.
        j = w._jobs[1]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while j.progress_timer is None and loop.time() < deadline:
            await asyncio.sleep(0.001)  # the loop takes the handler's offers in turn
        self.assertIsNotNone(j.progress_timer, "no flush armed for the reports held back")
        self.assertAlmostEqual(j.progress_timer.when() - loop.time(), 3600.0, delta=WAIT)
        j.progress_timer.cancel()
        w._progress_due(j)  # the flush, now instead of in an hour: the newest report goes
        last = await s.recv("progress")
        self.assertEqual((last.fraction, last.message), (1.0, "step 5"))
        self.progress_go.set()
        r = await s.recv("result")
        self.assertEqual(r.success.result, b"done")
        s.send(result_ack=ack(1))
        await self.stop_and_expect_drain(w, task, s)

    async def test_progress_held_back_goes_right_before_the_result_and_none_after(self):
        w = self.make_worker()
        w._clock = lambda: 100.0  # never moves: reports 2..5 wait for a flush
        w._progress_interval = 3600.0  # whose timer would fire only after the test
        task, s, _ = await self.start(w)
        self.addCleanup(task.cancel)
        s.send(assignment=assignment(1, "steps"))
        await s.recv("started")
        await s.recv("progress")
        j = w._jobs[1]
        self.progress_go.set()
        last = await s.recv("progress")  # the handler returned: the newest report, then the result
        self.assertEqual((last.fraction, last.message), (1.0, "step 5"))
        await s.recv("result")
        self.assertEqual(s.batches[-1], 2, "the last report and the result, queued together, share a batch frame")
        w._progress_due(j)  # as if its flush came now: it finds nothing to send
        s.send(result_ack=ack(1))
        await self.stop_and_expect_drain(w, task, s)  # the Drain is next, no Progress before it

    async def test_a_refused_progress_report_is_only_logged_unless_the_lease_is_stale(self):
        w = self.make_worker()
        task, s, _ = await self.start(w)
        self.addCleanup(task.cancel)

        def refused(code):
            return pb.Refused(
                job_id=1, lease_token="100", refused_message=pb.REFUSED_MESSAGE_PROGRESS, code=code, message="scripted"
            )

        s.send(assignment=assignment(1, "block"))
        await s.recv("started")
        s.send(refused=refused(3))  # INVALID_ARGUMENT: the report broke a rule
        s.send(refused=refused(14))  # UNAVAILABLE: the next report replaces it
        s.send(assignment=assignment(2))  # read after the two refusals: once it ran, they were handled
        await s.recv("started")
        await s.recv("result")
        s.send(result_ack=ack(2))
        self.assertIn(1, w._jobs, "the job runs on after a refused report")
        self.assertEqual(self.cancel_reasons, [])
        s.send(refused=refused(9))  # FAILED_PRECONDITION: the lease is stale
        await asyncio.wait_for(self.seen_cancel.wait(), WAIT)
        self.assertEqual(self.cancel_reasons, ["lease_lost"], "only the stale lease stopped the job")
        await self.stop_and_expect_drain(w, task, s)  # no Result for the lost job


if __name__ == "__main__":
    unittest.main()
