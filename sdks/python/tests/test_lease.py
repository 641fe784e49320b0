"""The worker gives up a lease by itself once it ran out on its own clock without an extension."""

import asyncio
import unittest

from jobwire import CANCEL_LEASE_LOST
from jobwire.lease import MAX_MARGIN, MIN_MARGIN, lease_margin
from jobwire.v1 import worker_service_pb2 as pb

from tests.test_worker_stream import WAIT, BrokerTestCase, assignment


class LeaseMarginTest(unittest.TestCase):
    def test_margin(self):
        cases = [
            (30.0, 10.0, 3.0),  # the broker's defaults: a tenth
            (3.0, 1.0, 0.3),
            (1.0, 0.333, MIN_MARGIN),  # a tenth would be too small
            (600.0, 200.0, MAX_MARGIN),  # a tenth would waste the lease
            (3.0, 2.9, 0.05),  # half of what a heartbeat has left
            (1.0, 2.0, 0.0),  # a heartbeat slower than the lease
        ]
        for lease, heartbeat, want in cases:
            with self.subTest(lease=lease, heartbeat=heartbeat):
                self.assertAlmostEqual(lease_margin(lease, heartbeat), want)


class LocalLeaseTest(BrokerTestCase):
    async def wait_for(self, cond, what):
        deadline = asyncio.get_running_loop().time() + WAIT
        while not cond():
            if asyncio.get_running_loop().time() > deadline:
                self.fail(f"timed out waiting for {what}")
            await asyncio.sleep(0.01)

    async def test_lease_runs_out_without_an_extension(self):
        # The broker answers nothing, as a frozen one would: the handler is cancelled once the
        # lease (1s, less its 0.25s margin) has passed, and no result is sent.
        w = self.make_worker()
        loop = asyncio.get_running_loop()
        task, s, _ = await self.start(w, lease=1.0, heartbeat=0.3)
        sent = loop.time()
        s.send(assignment=assignment(1, "block"))
        await s.recv("started")
        await asyncio.wait_for(self.seen_cancel.wait(), WAIT)
        self.assertGreaterEqual(loop.time() - sent, 0.7)
        self.assertEqual(self.cancel_reasons, [CANCEL_LEASE_LOST])
        # The job is forgotten: the next message is the Drain, not a Result.
        await self.stop_and_expect_drain(w, task, s)

    async def test_extension_counts_from_the_heartbeat(self):
        w = self.make_worker()
        loop = asyncio.get_running_loop()
        task, s, _ = await self.start(w, lease=2.0, heartbeat=0.1)
        s.send(assignment=assignment(1, "block"))
        await s.recv("started")
        first_end = w._jobs[1].lease_end
        hb = await s.recv("heartbeat")
        while not hb.leases:
            hb = await s.recv("heartbeat")
        read = loop.time()  # the worker sent the heartbeat before this
        s.send(heartbeat_ack=pb.HeartbeatAck(extended=list(hb.leases)))
        await self.wait_for(lambda: w._jobs[1].lease_end != first_end, "the extension")
        # Counted from the heartbeat's sending, not from the ack's arrival (which came later).
        self.assertLessEqual(w._jobs[1].lease_end, read + 2.0 - lease_margin(2.0, 0.1))
        self.release_block.set()
        await s.recv("result")
        s.send(result_ack=pb.ResultAck(job_id=1, lease_token="100", decision=pb.DECISION_SUCCEEDED))
        await self.stop_and_expect_drain(w, task, s)

    async def test_answered_heartbeats_keep_the_lease(self):
        # Twenty-five answered heartbeats, 0.1s apart, carry the job past its 2s lease.
        w = self.make_worker()
        task, s, _ = await self.start(w, lease=2.0, heartbeat=0.1)
        s.send(assignment=assignment(1, "block"))
        await s.recv("started")
        answered = 0
        while answered < 25:
            hb = await s.recv("heartbeat")
            if hb.leases:
                s.send(heartbeat_ack=pb.HeartbeatAck(extended=list(hb.leases)))
                answered += 1
        self.assertFalse(self.seen_cancel.is_set())
        self.release_block.set()
        r = await s.recv("result")
        self.assertTrue(r.HasField("success"))
        s.send(result_ack=pb.ResultAck(job_id=1, lease_token="100", decision=pb.DECISION_SUCCEEDED))
        await self.stop_and_expect_drain(w, task, s)
