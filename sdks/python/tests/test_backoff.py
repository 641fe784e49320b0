import unittest

from jobwire import Backoff


class BackoffTest(unittest.TestCase):
    def test_ceiling_doubles_then_caps(self):
        b = Backoff(base=0.5, cap=4.0)
        got = [b.ceiling(n) for n in range(1, 7)]
        self.assertEqual(got, [0.5, 1.0, 2.0, 4.0, 4.0, 4.0])

    def test_ceiling_never_overflows(self):
        self.assertEqual(Backoff(base=1, cap=60).ceiling(10_000), 60)

    def test_full_jitter_scales_the_ceiling(self):
        draws = iter([0.0, 0.5, 0.999, 0.5])
        b = Backoff(base=1.0, cap=8.0, rand=lambda: next(draws))
        self.assertEqual(b.next_delay(), 0.0)  # 0.0 * 1
        self.assertEqual(b.next_delay(), 1.0)  # 0.5 * 2
        self.assertAlmostEqual(b.next_delay(), 3.996)  # 0.999 * 4
        b.reset()
        self.assertEqual(b.next_delay(), 0.5)  # 0.5 * 1 after reset

    def test_rejects_bad_config(self):
        for base, cap in [(0, 1), (-1, 1), (2, 1)]:
            with self.subTest(base=base, cap=cap), self.assertRaises(ValueError):
                Backoff(base=base, cap=cap)


if __name__ == "__main__":
    unittest.main()
