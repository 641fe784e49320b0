import json
import unittest

from jobwire import FatalError, RetryAfter, classify
from jobwire.errors import to_failure
from jobwire.v1 import job_pb2

FATAL = job_pb2.FAILURE_KIND_FATAL
TRANSIENT = job_pb2.FAILURE_KIND_TRANSIENT


class CustomBug(ValueError):
    pass


def raised(exc):
    """Return exc after raising it, so it carries a traceback like a handler's error."""
    try:
        raise exc
    except BaseException as e:  # noqa: BLE001
        return e


class ClassifyTest(unittest.TestCase):
    def test_kinds(self):
        try:
            json.loads("{nope")
        except json.JSONDecodeError as e:
            json_err = e
        cases = [
            ("TypeError", TypeError("t"), FATAL),
            ("ValueError", ValueError("v"), FATAL),
            ("KeyError", KeyError("k"), FATAL),
            ("AttributeError", AttributeError("a"), FATAL),
            ("JSONDecodeError", json_err, FATAL),
            ("NotImplementedError", NotImplementedError("n"), FATAL),
            ("FatalError", FatalError("f"), FATAL),
            ("CustomBug", CustomBug("subclass of ValueError"), FATAL),
            ("RuntimeError", RuntimeError("r"), TRANSIENT),
            ("ConnectionError", ConnectionError("c"), TRANSIENT),
            ("TimeoutError", TimeoutError("t"), TRANSIENT),
            ("OSError", OSError("o"), TRANSIENT),
            ("Exception", Exception("e"), TRANSIENT),
            ("RetryAfter", RetryAfter(5), TRANSIENT),
        ]
        for name, exc, kind in cases:
            with self.subTest(name):
                c = classify(raised(exc))
                self.assertEqual(c.kind, kind)
                self.assertEqual(c.error_type, name)
                self.assertIn("Traceback", c.details)

    def test_message_and_details(self):
        c = classify(raised(ValueError("bad payload")))
        self.assertEqual(c.message, "bad payload")
        self.assertIn("ValueError: bad payload", c.details)
        self.assertIsNone(c.retry_after)

    def test_retry_after_on_the_wire(self):
        c = classify(raised(RetryAfter(2.5, "rate limited")))
        self.assertEqual(c.retry_after, 2.5)
        self.assertEqual(c.message, "rate limited")
        f = to_failure(c)
        self.assertTrue(f.HasField("retry_after"))
        self.assertEqual(f.retry_after.ToNanoseconds(), 2_500_000_000)
        self.assertEqual(f.kind, TRANSIENT)

    def test_no_retry_after_unless_asked(self):
        f = to_failure(classify(raised(RuntimeError("x"))))
        self.assertFalse(f.HasField("retry_after"))

    def test_retry_after_rejects_negative(self):
        with self.assertRaises(ValueError):
            RetryAfter(-1)


if __name__ == "__main__":
    unittest.main()
