"""JobContext's cancellation signal, whose events are made on the first wait."""

import asyncio
import threading
import unittest

from jobwire import CANCEL_REQUESTED, JobCancelled
from jobwire.context import JobContext
from jobwire.v1 import job_pb2, worker_service_pb2 as pb

WAIT = 5.0  # upper bound for anything that should happen promptly


def context() -> JobContext:
    return JobContext(pb.Assignment(job=job_pb2.Job(id=7, type="t"), lease_token="lt", attempt=1))


class CancelTest(unittest.TestCase):
    def test_cancel_before_any_wait_is_seen_by_every_wait(self):
        ctx = context()
        ctx._cancel(CANCEL_REQUESTED)
        self.assertTrue(ctx.cancelled)
        self.assertEqual(ctx.cancel_reason, CANCEL_REQUESTED)
        self.assertTrue(ctx.wait_cancelled(0))
        self.assertTrue(asyncio.run(ctx.wait_cancelled_async(0)))
        with self.assertRaises(JobCancelled):
            ctx.sleep(WAIT)

    def test_cancel_wakes_a_waiting_thread(self):
        ctx = context()
        waiting = threading.Event()
        got = []

        def handler():
            waiting.set()
            got.append(ctx.wait_cancelled(WAIT))

        t = threading.Thread(target=handler)
        t.start()
        self.assertTrue(waiting.wait(WAIT))
        ctx._cancel(CANCEL_REQUESTED)
        t.join(WAIT)
        self.assertEqual(got, [True])

    def test_cancel_wakes_an_async_wait(self):
        async def main():
            ctx = context()
            task = asyncio.create_task(ctx.wait_cancelled_async(WAIT))
            await asyncio.sleep(0)  # the task is waiting now
            ctx._cancel(CANCEL_REQUESTED)
            return await task

        self.assertTrue(asyncio.run(main()))

    def test_not_cancelled_wait_times_out(self):
        ctx = context()
        self.assertFalse(ctx.cancelled)
        self.assertFalse(ctx.wait_cancelled(0.01))
        self.assertFalse(asyncio.run(ctx.wait_cancelled_async(0.01)))
        ctx.raise_if_cancelled()

    def test_metadata(self):
        a = pb.Assignment(job=job_pb2.Job(id=7, type="t", metadata={"traceparent": "00-x"}), lease_token="lt")
        ctx = JobContext(a)
        self.assertEqual(ctx.metadata, {"traceparent": "00-x"})
        self.assertEqual(ctx.traceparent, "00-x")


if __name__ == "__main__":
    unittest.main()
