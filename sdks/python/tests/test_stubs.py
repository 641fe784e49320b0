"""The generated stubs load on the protobuf and grpc runtimes the library runs on, silently."""

import os
import subprocess
import sys
import unittest

STUBS = ("admin_service", "job", "producer_service", "token_service", "worker_service")


class StubsTest(unittest.TestCase):
    def test_stubs_load_without_warnings(self):
        # The stubs come from Debian's protoc 3.21 (scripts/gen-polyglot.sh); a runtime that found
        # them too old would warn (or refuse) on import. A fresh interpreter, so that nothing is
        # imported yet, with every warning an error.
        imports = "; ".join(f"import jobwire.v1.{s}_pb2, jobwire.v1.{s}_pb2_grpc" for s in STUBS)
        out = subprocess.run(
            [sys.executable, "-W", "error", "-c", imports],
            capture_output=True,
            text=True,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        )
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stderr, "")


if __name__ == "__main__":
    unittest.main()
