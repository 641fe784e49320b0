"""The channel the Worker opens when no channel_factory is given."""

import unittest
from unittest import mock

import grpc

from jobwire import Worker
from jobwire.worker import CHANNEL_OPTIONS


class ChannelTest(unittest.TestCase):
    def test_default_channel_does_not_probe_bandwidth(self):
        # The probe pings the broker for each job read (docs/performance-history.md).
        self.assertIn(("grpc.http2.bdp_probe", 0), CHANNEL_OPTIONS)
        for tls, patched in [(False, "insecure_channel"), (True, "secure_channel")]:
            with self.subTest(tls=tls), mock.patch.object(grpc.aio, patched) as channel:
                Worker("127.0.0.1:7070", tls=tls)._channel_factory("127.0.0.1:7070")
                channel.assert_called_once()
                self.assertEqual(channel.call_args.kwargs.get("options"), CHANNEL_OPTIONS)

    def test_a_given_factory_is_used_as_it_is(self):
        made = []
        w = Worker("127.0.0.1:7070", channel_factory=lambda addr: made.append(addr) or "chan")
        self.assertEqual(w._channel_factory("127.0.0.1:7070"), "chan")
        self.assertEqual(made, ["127.0.0.1:7070"])


if __name__ == "__main__":
    unittest.main()
