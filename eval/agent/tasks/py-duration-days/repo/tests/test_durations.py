import unittest

from durations import format_duration, parse_duration


class DurationTest(unittest.TestCase):
    def test_format(self):
        self.assertEqual(format_duration(0), "0s")
        self.assertEqual(format_duration(45), "45s")
        self.assertEqual(format_duration(3600), "1h")
        self.assertEqual(format_duration(3725), "1h 2m 5s")

    def test_parse(self):
        self.assertEqual(parse_duration("1h 2m 5s"), 3725)
        self.assertEqual(parse_duration("90s"), 90)
        self.assertEqual(parse_duration("5m1h"), 3900)

    def test_parse_errors(self):
        for bad in ["", "5x", "abc", "1h x"]:
            with self.assertRaises(ValueError):
                parse_duration(bad)
