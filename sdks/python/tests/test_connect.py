"""Connection settings from the environment, and connection failures no reconnect can fix, against
a broker that serves TLS on loopback with throwaway certificates made by openssl."""

import asyncio
import logging
import os
import shutil
import subprocess
import tempfile
import unittest

import grpc

from jobwire import Backoff, ConnectError, Worker, settings_from_env
from jobwire.v1 import job_pb2, worker_service_pb2 as pb, worker_service_pb2_grpc

from tests.test_worker_stream import WAIT, FakeBroker, ack, dur

# A worker that reconnects instead of stopping runs until this ends the test.
BOUND = 20.0


def make_ca(d, name):
    """A CA in d: name.pem and name-key.pem."""
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-days", "1", "-subj", f"/CN={name}", "-keyout", f"{d}/{name}-key.pem", "-out", f"{d}/{name}.pem"],
        check=True, capture_output=True,
    )


def issue(d, ca, name, ext):
    """A certificate name.pem with its key name-key.pem, signed by the CA ca."""
    subprocess.run(
        ["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-subj", f"/CN={name}", "-keyout", f"{d}/{name}-key.pem", "-out", f"{d}/{name}.csr"],
        check=True, capture_output=True,
    )
    with open(f"{d}/{name}.ext", "w") as f:
        f.write(ext)
    subprocess.run(
        ["openssl", "x509", "-req", "-in", f"{d}/{name}.csr", "-CA", f"{d}/{ca}.pem", "-CAkey", f"{d}/{ca}-key.pem",
         "-CAcreateserial", "-days", "1", "-extfile", f"{d}/{name}.ext", "-out", f"{d}/{name}.pem"],
        check=True, capture_output=True,
    )


def read(path):
    with open(path, "rb") as f:
        return f.read()


@unittest.skipUnless(shutil.which("openssl"), "openssl makes the test certificates")
class ConnectTest(unittest.IsolatedAsyncioTestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp()
        d = cls.dir
        make_ca(d, "ca")
        make_ca(d, "other")
        issue(d, "ca", "server", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
        issue(d, "ca", "client", "extendedKeyUsage=clientAuth\n")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

    def path(self, name):
        return os.path.join(self.dir, name)

    async def serve(self, tls, mutual=False):
        """A scripted broker on loopback, serving TLS (requiring client certificates when mutual)."""
        broker = FakeBroker()
        server = grpc.aio.server()
        worker_service_pb2_grpc.add_WorkerServiceServicer_to_server(broker, server)
        if tls:
            creds = grpc.ssl_server_credentials(
                [(read(self.path("server-key.pem")), read(self.path("server.pem")))],
                root_certificates=read(self.path("ca.pem")) if mutual else None,
                require_client_auth=mutual,
            )
            port = server.add_secure_port("127.0.0.1:0", creds)
        else:
            port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        self.addAsyncCleanup(server.stop, None)
        return broker, f"127.0.0.1:{port}"

    def worker(self, **kw):
        w = Worker(worker_id="w1", capacity=1, backoff=Backoff(base=0.01, cap=0.05), **kw)
        w.register("echo", lambda ctx: None)
        return w

    async def test_mismatched_tls_stops_run_with_the_fix(self):
        _, mtls = await self.serve(tls=True, mutual=True)
        _, plain = await self.serve(tls=False)
        ca, other = self.path("ca.pem"), self.path("other.pem")
        cert, key = self.path("client.pem"), self.path("client-key.pem")
        cases = {
            "wrong CA": (dict(address=mtls, tls_ca=other, tls_cert=cert, tls_key=key),
                         "not signed by a CA this worker trusts", "JOBWIRE_TLS_CA"),
            "no client certificate": (dict(address=mtls, tls_ca=ca),
                                      "requires a client certificate", "JOBWIRE_TLS_CERT"),
            "plaintext against TLS": (dict(address=mtls), "serves TLS and this worker connected without it",
                                      "JOBWIRE_TLS_CA"),
            "TLS against plaintext": (dict(address=plain, tls_ca=ca), "does not serve TLS", "--tls-cert"),
            "a name the certificate does not hold": (
                dict(address=mtls, tls_ca=ca, tls_cert=cert, tls_key=key, tls_server_name="jobwire.invalid"),
                "does not name the address", "JOBWIRE_TLS_SERVER_NAME"),
        }
        for name, (kw, problem, fix) in cases.items():
            with self.subTest(name):
                w = self.worker(**kw)
                with self.assertRaises(ConnectError) as cm:
                    await asyncio.wait_for(w.run(), BOUND)
                e = cm.exception
                self.assertEqual(e.kind, "tls")
                self.assertIn(problem, e.problem)
                self.assertIn(fix, e.fix)
                self.assertIsInstance(e, grpc.aio.AioRpcError)
                self.assertEqual(e.code(), grpc.StatusCode.UNAVAILABLE)

    async def test_refused_token_stops_run_with_the_fix(self):
        broker, addr = await self.serve(tls=True)
        w = self.worker(address=addr, tls_ca=self.path("ca.pem"), token="jw_revoked")
        task = asyncio.create_task(w.run())
        s = await broker.next_stream()
        await s.recv("hello")
        s.outbox.put_nowait(grpc.StatusCode.UNAUTHENTICATED)
        with self.assertRaises(ConnectError) as cm:
            await asyncio.wait_for(task, WAIT)
        self.assertEqual(cm.exception.kind, "auth")
        self.assertIn("JOBWIRE_TOKEN", cm.exception.fix)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAUTHENTICATED)

    async def test_a_broker_not_there_yet_is_waited_for(self):
        # Nothing listens on the port: that is a broker not started yet, so the worker keeps
        # reconnecting until it is stopped.
        failures = []
        handler = logging.Handler()
        handler.emit = lambda record: failures.append(record) if "stream error" in record.getMessage() else None
        logging.getLogger("jobwire").addHandler(handler)
        self.addCleanup(logging.getLogger("jobwire").removeHandler, handler)
        w = self.worker(address="127.0.0.1:1")
        task = asyncio.create_task(w.run())
        deadline = asyncio.get_running_loop().time() + WAIT
        while len(failures) < 3 and not task.done() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        self.assertFalse(task.done(), "run() stopped although the broker may still come up")
        self.assertGreaterEqual(len(failures), 3)
        w.shutdown()
        await asyncio.wait_for(task, WAIT)

    async def test_from_env_reaches_a_mutual_tls_broker(self):
        broker, addr = await self.serve(tls=True, mutual=True)
        env = {
            "JOBWIRE_ADDR": addr.replace("127.0.0.1", "localhost"),
            "JOBWIRE_TOKEN": "jw_abc_secret",
            "JOBWIRE_TLS_CA": self.path("ca.pem"),
            "JOBWIRE_TLS_CERT": self.path("client.pem"),
            "JOBWIRE_TLS_KEY": self.path("client-key.pem"),
        }
        self.assertEqual(settings_from_env(env)["tls_cert"], self.path("client.pem"))
        w = Worker.from_env(env, worker_id="w1", capacity=1)
        ran = asyncio.Event()
        w.register("echo", lambda ctx: ran.set())
        task = asyncio.create_task(w.run())
        s = await broker.next_stream()
        await s.recv("hello")
        self.assertEqual(dict(s.context.invocation_metadata()).get("authorization"), "Bearer jw_abc_secret")
        s.send(welcome=pb.Welcome(session_id="s1", lease_duration=dur(30), heartbeat_interval=dur(60)))
        s.send(assignment=pb.Assignment(job=job_pb2.Job(id=1, type="echo", payload=b"{}", max_attempts=1),
                                        attempt=1, lease_token="100"))
        await s.recv("started")
        result = await s.recv("result")
        self.assertEqual(result.job_id, 1)
        self.assertTrue(ran.is_set())
        s.send(result_ack=ack(1))
        w.shutdown()
        await s.recv("drain")
        self.assertIsNone(await s.recv())
        s.close()
        await asyncio.wait_for(task, WAIT)


if __name__ == "__main__":
    unittest.main()
